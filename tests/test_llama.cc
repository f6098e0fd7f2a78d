// The Llama family's layers and model against independent references: the
// CPU kernels against plain double loops and finite differences (the
// rotary embedding, linear in its input, against its own adjoint), the
// rotary table against frequencies worked by hand, and the presets against
// their published parameter counts. (The model against a naive Llama:
// tests/test_gpt_reference.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/kernels.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/rope.h"
#include "tests/fd_check.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::random_vector;

// sum(out * r): a scalar whose gradient with respect to out is r.
double weighted(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * r[i];
  return s;
}

TEST(LlamaKernels, RmsNormIsTheFormulaAndItsGradientTheFiniteDifference) {
  const int N = 5, C = 24;
  const float eps = 1e-5f;
  std::vector<float> x = random_vector(N * C, 1), w = random_vector(C, 2, 0.5), out(N * C), rstd(N);
  for (float& v : w) v += 1.0f;
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int i = 0; i < C; ++i) ms += double(x[n * C + i]) * x[n * C + i];
    const double r = 1 / std::sqrt(ms / C + eps);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int i = 0; i < C; ++i) EXPECT_NEAR(out[n * C + i], x[n * C + i] * r * w[i], 1e-5);
  }
  const std::vector<float> dy = random_vector(N * C, 3);
  std::vector<float> dx(N * C, 0.25f), dw(C, 0.5f);  // both accumulate
  cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  auto f = [&] {
    std::vector<float> o(N * C), r(N);
    cpu::rmsnorm_forward(o.data(), r.data(), x.data(), w.data(), N, C, eps);
    return weighted(o, dy);
  };
  for (int i : {0, 7, 31, 95, 119}) {
    std::vector<float> e(N * C, 0.0f);
    e[i] = 1;
    EXPECT_NEAR(testing::directional_fd(f, x.data(), e, 1e-2) + 0.25, dx[i], 2e-3) << "x " << i;
  }
  for (int i : {0, 11, 23}) {
    std::vector<float> e(C, 0.0f);
    e[i] = 1;
    EXPECT_NEAR(testing::directional_fd(f, w.data(), e, 1e-2) + 0.5, dw[i], 2e-3) << "w " << i;
  }
  // A frozen weight: the input's gradient alone, the same bits.
  std::vector<float> dx2(N * C, 0.25f);
  cpu::rmsnorm_backward(dx2.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_EQ(dx2, dx);
}

TEST(LlamaKernels, SwiGluIsSiluOfTheGateTimesUpAndItsGradientTheFiniteDifference) {
  const int N = 3, F = 10;
  std::vector<float> in = random_vector(N * 2 * F, 4, 2.0), out(N * F);
  cpu::swiglu_forward(out.data(), in.data(), N, F);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < F; ++i) {
      const double g = in[n * 2 * F + i], u = in[n * 2 * F + F + i];
      EXPECT_NEAR(out[n * F + i], g / (1 + std::exp(-g)) * u, 1e-5 * (1 + std::fabs(g * u)));
    }
  }
  const std::vector<float> dy = random_vector(N * F, 5);
  std::vector<float> din(N * 2 * F);
  cpu::swiglu_backward(din.data(), in.data(), dy.data(), N, F);
  auto f = [&] {
    std::vector<float> o(N * F);
    cpu::swiglu_forward(o.data(), in.data(), N, F);
    return weighted(o, dy);
  };
  for (int i = 0; i < N * 2 * F; ++i) {
    std::vector<float> e(N * 2 * F, 0.0f);
    e[i] = 1;
    EXPECT_NEAR(testing::directional_fd(f, in.data(), e, 1e-3), din[i], 2e-3 * (1 + std::fabs(din[i]))) << i;
  }
}

// An adapter of part of a fused product (LoRA on q_proj of q, k and v):
// its columns of the product's rows taken out, and its share added in,
// every other column untouched.
TEST(LlamaKernels, ColumnsOfAWiderRowAreTakenAndAddedInPlace) {
  const int N = 5, ld = 12, c0 = 4, n = 3;
  const std::vector<float> x = random_vector(N * ld, 8), t = random_vector(N * n, 9);
  std::vector<float> taken(N * n), y = x;
  cpu::take_columns(taken.data(), x.data(), ld, c0, N, n);
  cpu::add_columns(y.data(), ld, c0, t.data(), N, n);
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < ld; ++c) {
      const bool in = c >= c0 && c < c0 + n;
      if (in) EXPECT_EQ(taken[r * n + c - c0], x[r * ld + c]);
      EXPECT_EQ(y[r * ld + c], in ? x[r * ld + c] + t[r * n + c - c0] : x[r * ld + c]) << r << ", " << c;
    }
  }
}

// The rotary table: theta 10000 and a head of 4 have frequencies 1 and
// 1/100, so position p turns by p and p/100.
TEST(LlamaRope, TheTableHoldsEachPositionsCosineAndSine) {
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_embd = 8;
  c.n_head = 2;
  c.n_kv_head = 1;
  ASSERT_EQ(c.head_dim(), 4);
  const std::vector<float> t = rope_table(c, 5);
  ASSERT_EQ(t.size(), 5u * 2 * 2);
  for (int p = 0; p < 5; ++p) {
    EXPECT_NEAR(t[(p * 2 + 0) * 2], std::cos(p), 1e-6);
    EXPECT_NEAR(t[(p * 2 + 0) * 2 + 1], std::sin(p), 1e-6);
    EXPECT_NEAR(t[(p * 2 + 1) * 2], std::cos(p / 100.0), 1e-6);
    EXPECT_NEAR(t[(p * 2 + 1) * 2 + 1], std::sin(p / 100.0), 1e-6);
  }
}

// Llama 3.1-8B's frequencies (theta 500000, a head of 128, factor 8 over
// 8192 positions, low 1, high 4): a wavelength under 2048 is kept, one
// over 8192 slowed 8 times, one between blended by 8192 / wavelength - 1
// over 3.
TEST(LlamaRope, LlamaThreeScalingKeepsShortWavesAndSlowsLongOnes) {
  const GptConfig c = *gpt_preset("llama-3.1-8b");
  const std::vector<float> f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  int kept = 0, slowed = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double plain = std::pow(500000.0, -2.0 * i / 128), wavelen = 2 * M_PI / plain;
    double want = plain;
    if (wavelen > 8192) {
      want = plain / 8, ++slowed;
    } else if (wavelen >= 2048) {
      const double s = (8192 / wavelen - 1) / 3;
      want = (1 - s) * plain / 8 + s * plain, ++blended;
    } else {
      ++kept;
    }
    EXPECT_NEAR(f[i], want, 2e-6 * want) << "frequency " << i;
  }
  // Each band holds some of the frequencies.
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(blended, 0);
}

// Rotary positions in place: q and k turned as transformers' rotate_half
// turns them, v as it is, each head in its place; the backward is the
// forward's adjoint (the forward is linear), so <dy, F x> = <B dy, x>.
TEST(LlamaRope, TurnsQAndKInPlaceAndItsBackwardIsTheAdjoint) {
  const int T = 6, B = 2, NH = 4, KV = 2, hd = 8, N = B * T;
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_embd = NH * hd;
  c.n_head = NH;
  c.n_kv_head = KV;
  const std::vector<float> table = rope_table(c, T);
  const RopeShape s{T, NH, KV, hd};
  const int64_t W = s.width(), C = s.C();
  const std::vector<float> qkv = random_vector(N * W, 6);
  std::vector<float> out = qkv;
  cpu::rope_forward(out.data(), table.data(), s, N);
  const std::vector<float> inv = rope_inv_freq(c);
  for (int n = 0; n < N; ++n) {
    const int pos = n % T;
    for (int h = 0; h < NH; ++h) {
      const float* q = &qkv[n * W + h * hd];
      for (int d = 0; d < hd; ++d) {
        const int i = d % (hd / 2);
        const double a = double(float(pos) * inv[i]), cs = std::cos(a), sn = std::sin(a);
        // rotate_half: (-x[d + hd/2], x[d - hd/2]).
        const auto turned = [&](const float* x) {
          return d < hd / 2 ? x[d] * cs - x[d + hd / 2] * sn : x[d] * cs + x[d - hd / 2] * sn;
        };
        EXPECT_NEAR(out[n * W + h * hd + d], turned(q), 1e-5);
        if (h >= KV) continue;
        const float* k = &qkv[n * W + C + h * hd];
        const float* v = &qkv[n * W + C + KV * hd + h * hd];
        EXPECT_NEAR(out[n * W + C + h * hd + d], turned(k), 1e-5);
        EXPECT_EQ(out[n * W + C + KV * hd + h * hd + d], v[d]);
      }
    }
  }
  const std::vector<float> dy = random_vector(N * W, 7);
  std::vector<float> dx = dy;
  cpu::rope_backward(dx.data(), table.data(), s, N);
  const double lhs = weighted(out, dy), rhs = weighted(qkv, dx);
  EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5);
}

// The presets' parameters, by formula and by layout, are the counts the
// models' Hugging Face files hold.
TEST(LlamaPresets, ParameterCountsAreThePublishedOnes) {
  const std::pair<const char*, int64_t> published[] = {{"llama-3.2-1b", 1235814400}, {"llama-3.2-3b", 3212749824},
                                                       {"llama-3.1-8b", 8030261248}, {"mistral-7b", 7248023552},
                                                       {"qwen2.5-0.5b", 494032768},  {"qwen2.5-1.5b", 1543714304},
                                                       {"qwen2.5-7b", 7615616512},   {"llama-3.1-70b", 70553706496},
                                                       {"qwen2.5-72b", 72706203648}};
  for (const auto& [name, count] : published) {
    const GptConfig c = *gpt_preset(name);
    ASSERT_TRUE(validate_gpt_config(c).ok()) << name;
    EXPECT_EQ(gpt_param_count(c), count) << name;
    EXPECT_EQ(GptLayout(c).num_params(), count) << name;
  }
}

TEST(LlamaPresets, ABadShapeIsRefusedNamingTheField) {
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_kv_head = 3;  // 4 heads
  EXPECT_NE(validate_gpt_config(c).message().find("n_kv_head"), std::string::npos);
  c = *gpt_preset("llama-tiny");
  c.ffn_hidden = 0;
  EXPECT_NE(validate_gpt_config(c).message().find("ffn_hidden"), std::string::npos);
  c = *gpt_preset("llama-tiny");
  c.n_embd = 12;  // heads of 3
  c.n_head = 4;
  c.n_kv_head = 2;
  EXPECT_NE(validate_gpt_config(c).message().find("even head size"), std::string::npos);
  c = *gpt_preset("llama-3.1-8b");
  c.rope_scaling.high_freq_factor = 0.5;
  EXPECT_NE(validate_gpt_config(c).message().find("rope_scaling"), std::string::npos);
  GptConfig g = *gpt_preset("gpt2-tiny");
  g.n_kv_head = 1;
  EXPECT_NE(validate_gpt_config(g).message().find("model.arch"), std::string::npos);
  EXPECT_NE(gpt_preset("llama-9b").status().message().find("llama-3.2-1b"), std::string::npos);
}

}  // namespace
}  // namespace zerod
