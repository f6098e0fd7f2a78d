// The model's forward (logits and loss) against a naive GPT-2 and a naive
// Llama (transformers' LlamaForCausalLM) written here with plain loops in
// double precision and no BLAS.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/ops/hd.h"
#include "runtime/model/gpt.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using Mat = std::vector<double>;
using testing::relative_l2;

struct NaiveGpt {
  const GptLayout& layout;
  const std::vector<float>& p;

  const float* at(int id, int layer) const { return p.data() + layout.offset(id, layer); }

  static Mat layernorm(const Mat& x, const float* w, const float* b, int N, int C) {
    Mat out(x.size());
    for (int n = 0; n < N; ++n) {
      double mean = 0, var = 0;
      for (int i = 0; i < C; ++i) mean += x[n * C + i];
      mean /= C;
      for (int i = 0; i < C; ++i) var += (x[n * C + i] - mean) * (x[n * C + i] - mean);
      var /= C;
      for (int i = 0; i < C; ++i) out[n * C + i] = (x[n * C + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
    }
    return out;
  }

  // x [N, in] times w [in, out] (Conv1D layout) plus bias.
  static Mat linear(const Mat& x, const float* w, const float* b, int N, int in, int out) {
    Mat y(size_t(N) * out);
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += x[n * in + i] * w[i * out + o];
        y[n * out + o] = s;
      }
    }
    return y;
  }

  // logits [B*T, V]
  Mat logits(const std::vector<int32_t>& tok, int B, int T) const {
    const GptConfig& c = layout.config();
    const int C = c.n_embd, NH = c.n_head, hs = C / NH, N = B * T, V = c.vocab_size;
    Mat x(size_t(N) * C);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        for (int i = 0; i < C; ++i) {
          x[(b * T + t) * C + i] = at(kWte, 0)[tok[b * T + t] * C + i] + at(kWpe, 0)[t * C + i];
        }
      }
    }
    for (int l = 0; l < c.n_layer; ++l) {
      const Mat h = layernorm(x, at(kLn1W, l), at(kLn1B, l), N, C);
      const Mat qkv = linear(h, at(kQkvW, l), at(kQkvB, l), N, C, 3 * C);
      Mat y(size_t(N) * C, 0.0);
      for (int b = 0; b < B; ++b) {
        for (int hd = 0; hd < NH; ++hd) {
          for (int t = 0; t < T; ++t) {
            std::vector<double> w(t + 1);
            double mx = -1e300;
            for (int s = 0; s <= t; ++s) {
              double dotp = 0;
              for (int i = 0; i < hs; ++i) {
                dotp += qkv[(b * T + t) * 3 * C + hd * hs + i] * qkv[(b * T + s) * 3 * C + C + hd * hs + i];
              }
              w[s] = dotp / std::sqrt(static_cast<double>(hs));
              mx = std::max(mx, w[s]);
            }
            double sum = 0;
            for (double& v : w) sum += (v = std::exp(v - mx));
            for (int s = 0; s <= t; ++s) {
              for (int i = 0; i < hs; ++i) {
                y[(b * T + t) * C + hd * hs + i] += w[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + hd * hs + i];
              }
            }
          }
        }
      }
      const Mat a = linear(y, at(kAttProjW, l), at(kAttProjB, l), N, C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
      const Mat h2 = layernorm(x, at(kLn2W, l), at(kLn2B, l), N, C);
      Mat f = linear(h2, at(kFcW, l), at(kFcB, l), N, C, 4 * C);
      for (double& v : f) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      const Mat m = linear(f, at(kFcProjW, l), at(kFcProjB, l), N, 4 * C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
    }
    const Mat h = layernorm(x, at(kLnfW, 0), at(kLnfB, 0), N, C);
    Mat out(size_t(N) * V);
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < V; ++v) {
        double s = 0;
        for (int i = 0; i < C; ++i) s += h[n * C + i] * at(kWte, 0)[v * C + i];
        out[n * V + v] = s;
      }
    }
    return out;
  }
};

// A model of shape cfg, its initial parameters nudged (gains away from 1,
// biases from 0), on random tokens: its logits and loss against the naive
// model's, and the last positions' logits against the full pass's.
template <class Naive>
void expect_naive_logits_and_loss(const GptConfig& cfg) {
  const int B = 3, T = 11;
  testing::CpuRig rig;
  auto model = *Gpt::create(cfg, B, 16, DType::kF32, false, rig.device, *rig.kernels);
  std::vector<float> params(model->layout().num_params());
  init_gpt_params(model->layout(), 5, params.data());
  NormalRng rng(9);
  for (float& p : params) p += static_cast<float>(0.05 * rng.next());
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
  for (auto& t : targets) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);

  const Mat ref = Naive{model->layout(), params}.logits(tokens, B, T);
  auto w = *FlatWeights::create(&model->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
  std::vector<float> logits(size_t(B) * T * cfg.vocab_size);
  ASSERT_TRUE(model->forward_logits(w, tokens.data(), B, T, logits.data(), /*last_only=*/false).ok());
  // fp32 arithmetic against double: relative L2 error far under 1e-5.
  EXPECT_LT(relative_l2(logits, ref), 1e-5);

  std::vector<float> last(size_t(B) * cfg.vocab_size);
  ASSERT_TRUE(model->forward_logits(w, tokens.data(), B, T, last.data(), /*last_only=*/true).ok());
  // Same values from a differently shaped product: equal up to fp32 summation order.
  for (int b = 0; b < B; ++b) {
    for (int v = 0; v < cfg.vocab_size; ++v) {
      EXPECT_NEAR(last[b * cfg.vocab_size + v], logits[((b * T) + T - 1) * cfg.vocab_size + v], 1e-5);
    }
  }

  const double ref_loss = testing::mean_cross_entropy(ref, targets, cfg.vocab_size);
  std::vector<float> grads(params.size(), 0.0f);
  FlatGrads sink(&model->layout(), grads.data());
  const double loss = *model->forward_backward(w, sink, tokens.data(), targets.data(), B, T, 1.0f);
  EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);
}

TEST(GptReference, LogitsAndLossMatchNaiveImplementation) {
  expect_naive_logits_and_loss<NaiveGpt>(GptConfig{2, 4, 32, 50, 16});
}

// A Llama in plain loops and doubles: HF's LlamaForCausalLM.
struct NaiveLlama {
  const GptLayout& layout;
  const std::vector<float>& p;

  const float* at(int id, int layer) const { return p.data() + layout.offset(id, layer); }
  const float* maybe(int id, int layer) const { return layout.tensor(id).numel ? at(id, layer) : nullptr; }

  static Mat rmsnorm(const Mat& x, const float* w, int N, int C, double eps) {
    Mat out(x.size());
    for (int n = 0; n < N; ++n) {
      double ms = 0;
      for (int i = 0; i < C; ++i) ms += x[n * C + i] * x[n * C + i];
      const double r = 1 / std::sqrt(ms / C + eps);
      for (int i = 0; i < C; ++i) out[n * C + i] = x[n * C + i] * r * w[i];
    }
    return out;
  }
  static Mat linear(const Mat& x, const float* w, const float* b, int N, int in, int out) {
    Mat y(size_t(N) * out);
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < out; ++o) {
        double s = b ? b[o] : 0;
        for (int i = 0; i < in; ++i) s += x[n * in + i] * w[i * out + o];
        y[n * out + o] = s;
      }
    }
    return y;
  }
  // Head h's vector at position n, turned: x[d] cos + rotate_half(x)[d] sin.
  static void turn(double* x, int hd, int pos, double theta) {
    std::vector<double> y(hd);
    for (int d = 0; d < hd; ++d) {
      const int i = d % (hd / 2);
      const double a = pos * std::pow(theta, -2.0 * i / hd);
      y[d] = x[d] * std::cos(a) + (d < hd / 2 ? -x[d + hd / 2] : x[d - hd / 2]) * std::sin(a);
    }
    std::copy(y.begin(), y.end(), x);
  }

  Mat logits(const std::vector<int32_t>& tok, int B, int T) const {
    const GptConfig& c = layout.config();
    const int C = c.n_embd, NH = c.n_head, KV = c.kv_heads(), hd = c.head_dim(), N = B * T, V = c.vocab_size;
    const int W = c.qkv_width(), F = c.ffn_hidden;
    Mat x(size_t(N) * C);
    for (int n = 0; n < N; ++n) {
      for (int i = 0; i < C; ++i) x[n * C + i] = at(kWte, 0)[tok[n] * C + i];
    }
    for (int l = 0; l < c.n_layer; ++l) {
      const Mat h = rmsnorm(x, at(kLn1W, l), N, C, c.norm_eps);
      Mat qkv = linear(h, at(kQkvW, l), maybe(kQkvB, l), N, C, W);
      for (int n = 0; n < N; ++n) {
        for (int hh = 0; hh < NH + KV; ++hh) turn(&qkv[n * W + hh * hd], hd, n % T, c.rope_theta);
      }
      Mat y(size_t(N) * C, 0.0);
      for (int b = 0; b < B; ++b) {
        for (int hh = 0; hh < NH; ++hh) {
          const int kvh = hh / (NH / KV);
          for (int t = 0; t < T; ++t) {
            std::vector<double> w(t + 1);
            double mx = -1e300;
            for (int s = 0; s <= t; ++s) {
              double d = 0;
              for (int i = 0; i < hd; ++i)
                d += qkv[(b * T + t) * W + hh * hd + i] * qkv[(b * T + s) * W + C + kvh * hd + i];
              w[s] = d / std::sqrt(double(hd));
              mx = std::max(mx, w[s]);
            }
            double sum = 0;
            for (double& v : w) sum += (v = std::exp(v - mx));
            for (int s = 0; s <= t; ++s) {
              for (int i = 0; i < hd; ++i) {
                y[(b * T + t) * C + hh * hd + i] += w[s] / sum * qkv[(b * T + s) * W + C + KV * hd + kvh * hd + i];
              }
            }
          }
        }
      }
      const Mat a = linear(y, at(kAttProjW, l), nullptr, N, C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
      const Mat h2 = rmsnorm(x, at(kLn2W, l), N, C, c.norm_eps);
      const Mat gu = linear(h2, at(kFcW, l), nullptr, N, C, 2 * F);
      Mat act(size_t(N) * F);
      for (int n = 0; n < N; ++n) {
        for (int i = 0; i < F; ++i) {
          const double g = gu[n * 2 * F + i], u = gu[n * 2 * F + F + i];
          act[n * F + i] = g / (1 + std::exp(-g)) * u;
        }
      }
      const Mat m = linear(act, at(kFcProjW, l), nullptr, N, F, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
    }
    const Mat h = rmsnorm(x, at(kLnfW, 0), N, C, c.norm_eps);
    const float* head = c.tie_embeddings ? at(kWte, 0) : at(kLmHead, 0);
    Mat out(size_t(N) * V);
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < V; ++v) {
        double s = 0;
        for (int i = 0; i < C; ++i) s += h[n * C + i] * head[v * C + i];
        out[n * V + v] = s;
      }
    }
    return out;
  }
};

// Grouped-query with its own head (llama-tiny's shape), and Qwen2's: q/k/v
// biases, a tied head, an eps of 1e-6, a theta of 1e6.
GptConfig qwen_like() {
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_embd = 48;
  c.n_head = 6;
  c.n_kv_head = 2;
  c.ffn_hidden = 72;
  c.qkv_bias = true;
  c.tie_embeddings = true;
  c.norm_eps = 1e-6;
  c.rope_theta = 1e6;
  return c;
}

class LlamaModel : public ::testing::TestWithParam<GptConfig> {};

TEST_P(LlamaModel, LogitsAndLossMatchNaiveImplementation) {
  GptConfig cfg = GetParam();
  cfg.vocab_size = 50;
  expect_naive_logits_and_loss<NaiveLlama>(cfg);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LlamaModel, ::testing::Values(*gpt_preset("llama-tiny"), qwen_like()),
                         [](const auto& info) { return info.param.qkv_bias ? "QwenLike" : "LlamaTiny"; });

TEST(GptReference, APassHoldsAnyShapeOfItsTokensAndRefusesMore) {
  // Made for 2 x 16 tokens: 8 rows of 4 fit, and match the naive model;
  // 33 tokens, or a row longer than 16, are refused.
  const GptConfig cfg{2, 4, 32, 50, 16};
  testing::CpuRig rig;
  auto model = *Gpt::create(cfg, 2, 16, DType::kF32, false, rig.device, *rig.kernels);
  ASSERT_EQ(model->max_tokens(), 32);
  std::vector<float> params(model->layout().num_params());
  init_gpt_params(model->layout(), 3, params.data());
  NormalRng rng(4);
  const int B = 8, T = 4;
  std::vector<int32_t> tokens(B * T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % cfg.vocab_size);
  const Mat ref = NaiveGpt{model->layout(), params}.logits(tokens, B, T);
  auto w = *FlatWeights::create(&model->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
  std::vector<float> logits(size_t(B) * T * cfg.vocab_size);
  ASSERT_TRUE(model->forward_logits(w, tokens.data(), B, T, logits.data(), /*last_only=*/false).ok());
  EXPECT_LT(relative_l2(logits, ref), 1e-5);
  std::vector<int32_t> more(40);
  for (auto [b, t] : {std::pair{11, 3}, std::pair{1, 17}, std::pair{0, 4}}) {
    const absl::Status s = model->forward_logits(w, more.data(), b, t, logits.data(), /*last_only=*/true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b << " x " << t;
    EXPECT_NE(s.message().find("holds 32 tokens a pass, 16 a row"), std::string::npos) << s.message();
  }
}

TEST(GptReference, InitialisationFollowsGpt2) {
  const GptConfig cfg{4, 2, 64, 100, 32};
  GptLayout layout(cfg);
  std::vector<float> p(layout.num_params());
  init_gpt_params(layout, 1, p.data());
  // Over all layers of a tensor.
  auto values = [&](int id) {
    std::vector<float> v;
    for (const ParamSegment& s : layout.segments()) {
      if (s.id == id) v.insert(v.end(), p.begin() + s.offset, p.begin() + s.offset + s.numel);
    }
    return v;
  };
  auto stddev = [&](int id) {
    double s = 0;
    const std::vector<float> v = values(id);
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
  };
  // Sample standard deviations of >= 6400 draws are within 5% of the target.
  EXPECT_NEAR(stddev(kWte), 0.02, 0.001);
  EXPECT_NEAR(stddev(kQkvW), 0.02, 0.001);
  EXPECT_NEAR(stddev(kFcW), 0.02, 0.001);
  EXPECT_NEAR(stddev(kAttProjW), 0.02 / std::sqrt(8.0), 0.05 * 0.02 / std::sqrt(8.0));
  EXPECT_NEAR(stddev(kFcProjW), 0.02 / std::sqrt(8.0), 0.05 * 0.02 / std::sqrt(8.0));
  for (int id : {kLn1W, kLn2W, kLnfW}) {
    for (float x : values(id)) ASSERT_EQ(x, 1.0f);
  }
  for (int id : {kLn1B, kQkvB, kAttProjB, kLn2B, kFcB, kFcProjB, kLnfB}) {
    for (float x : values(id)) ASSERT_EQ(x, 0.0f);
  }
  // The 124M preset has GPT-2's parameter count (tied embedding).
  EXPECT_EQ(GptLayout(*gpt_preset("gpt2")).num_params(), 124439808);
}

TEST(GptLayout, UnitsTileTheBufferAndHoldWholeTensors) {
  const GptConfig cfg{3, 2, 16, 40, 8};
  GptLayout layout(cfg);
  ASSERT_EQ(layout.num_units(), 5);
  int64_t next = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    EXPECT_EQ(layout.unit_begin(u), next);
    next += layout.unit_numel(u);
  }
  EXPECT_EQ(next, layout.num_params());
  // Segments tile the buffer in order, each inside the unit it names.
  next = 0;
  for (const ParamSegment& s : layout.segments()) {
    EXPECT_EQ(s.offset, next);
    const int u = layout.unit_of(s.id, s.layer);
    EXPECT_GE(s.offset, layout.unit_begin(u));
    EXPECT_LE(s.offset + s.numel, layout.unit_begin(u) + layout.unit_numel(u));
    next += s.numel;
  }
  EXPECT_EQ(next, layout.num_params());
  EXPECT_EQ(layout.segments().size(), 4u + 12u * 3u);
  EXPECT_EQ(layout.unit_numel(0), (40 + 8) * 16);
  EXPECT_EQ(layout.unit_numel(layout.final_unit()), 2 * 16);
  EXPECT_EQ(layout.offset(kQkvW, 2), layout.unit_begin(3) + 2 * 16);
}

// gpt_param_count, the formula that checks a claimed shape before any
// layout is built, counts what the layout holds; gpt2's is the published
// 124,439,808 and gpt2-xl's 1,557,611,200. Past int64 it saturates.
TEST(GptLayout, TheParameterCountFormulaIsTheLayoutsCount) {
  for (const char* preset : {"gpt2-tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}) {
    SCOPED_TRACE(preset);
    const GptConfig c = *gpt_preset(preset);
    EXPECT_EQ(gpt_param_count(c), GptLayout(c).num_params());
  }
  const GptConfig odd{3, 2, 6, 7, 5};
  EXPECT_EQ(gpt_param_count(odd), GptLayout(odd).num_params());
  EXPECT_EQ(gpt_param_count(*gpt_preset("gpt2")), 124439808);
  EXPECT_EQ(gpt_param_count(*gpt_preset("gpt2-xl")), 1557611200);
  const int big = std::numeric_limits<int>::max();
  EXPECT_EQ(gpt_param_count({big, 1, big, big, big}), std::numeric_limits<int64_t>::max());
}

TEST(GptLayout, AnyRangeInitialisesAsTheWholeBuffer) {
  const GptConfig cfg{3, 2, 16, 40, 8};
  GptLayout layout(cfg);
  const int64_t n = layout.num_params();
  std::vector<float> whole(n);
  init_gpt_params(layout, 9, whole.data());
  // Ranges starting and ending inside tensors, at odd and even offsets.
  for (int64_t step : {int64_t{1}, int64_t{7}, int64_t{333}, n / 3 + 1}) {
    std::vector<float> parts(n);
    for (int64_t b = 0; b < n; b += step) {
      const int64_t e = std::min(n, b + step);
      init_gpt_range(layout, 9, b, e, parts.data() + b);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(parts[i], whole[i]) << "element " << i << ", ranges of " << step;
  }
  std::vector<float> other(n);
  init_gpt_params(layout, 10, other.data());
  EXPECT_NE(other[layout.offset(kQkvW, 1)], whole[layout.offset(kQkvW, 1)]);
}

// wte of 2.56M parameters, drawn in pieces by the host's threads: each
// element is still draw i of wte's own stream, N(0, 0.02), as a plain loop
// over NormalRng gives it, from range starts at even and odd offsets, on
// one thread or all of them; and filled a part at a time as a GPU's
// staging fills it, with cursors, the parts in order (each goes on from
// the last) or backwards (each starts its stream afresh).
TEST(GptLayout, ASegmentInPiecesAndPartsIsItsStreamsDrawsInOrder) {
  const GptConfig cfg{1, 2, 64, 40000, 8};
  GptLayout layout(cfg);
  const int64_t n = layout.num_params(), wte = layout.offset(kWte, 0), V = cfg.vocab_size, C = cfg.n_embd;
  ASSERT_GT(V * C, int64_t{1} << 21);
  const uint64_t seed = 21;
  NormalRng rng(cuda::splitmix64(seed ^ cuda::splitmix64(uint64_t(kWte) << 32)));
  std::vector<float> want(V * C);
  for (float& w : want) w = static_cast<float>(rng.next() * 0.02);
  const int all = omp_get_max_threads();
  struct Restore {  // the threads of the tests that follow, whatever happens here
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{all};
  for (const int64_t begin : {int64_t{0}, int64_t{1}}) {
    for (const int threads : {1, all}) {
      SCOPED_TRACE(::testing::Message() << "from " << begin << ", " << threads << " threads");
      std::vector<float> got(n - begin);
      omp_set_num_threads(threads);
      init_gpt_range(layout, seed, begin, n, got.data());
      for (int64_t i = std::max(wte, begin); i < wte + V * C; ++i) {
        ASSERT_EQ(got[i - begin], want[i - wte]) << "wte element " << i - wte;
      }
    }
  }
  omp_set_num_threads(all);
  for (const bool backwards : {false, true}) {
    SCOPED_TRACE(backwards ? "parts backwards" : "parts in order");
    const int64_t part = 333'333;  // odd: parts start at odd and even draws
    std::vector<float> got(n);
    InitCursors cursors;
    const int64_t parts = (n + part - 1) / part;
    for (int64_t k = 0; k < parts; ++k) {
      const int64_t b = (backwards ? parts - 1 - k : k) * part, e = std::min(n, b + part);
      init_gpt_range(layout, seed, b, e, got.data() + b, &cursors);
    }
    for (int64_t i = 0; i < V * C; ++i) ASSERT_EQ(got[wte + i], want[i]) << "wte element " << i;
    std::vector<float> whole(n);
    init_gpt_params(layout, seed, whole.data());
    EXPECT_EQ(got, whole);
  }
}

}  // namespace
}  // namespace zerod
