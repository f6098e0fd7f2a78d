// Each CPU kernel's backward against central finite differences of its
// forward. The scalar checked is sum(out * R) for a fixed random R, so
// d/d(out) = R. Directions are random; tolerance: relative 1e-3 of the
// directional derivative (fp32 forward, eps 1e-3, values of order 1).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/kernels.h"
#include "tests/fd_check.h"
#include "tests/float_compare.h"

namespace zerod {
namespace {

using testing::directional_fd;
using testing::dot;
using testing::random_vector;

constexpr double kEps = 1e-3;
constexpr double kRelTol = 1e-3;

double weighted_sum(const std::vector<float>& out, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

// Checks d/dx of f along a few random directions against the analytic grad.
void expect_grad(const char* what, const std::function<double()>& f, std::vector<float>& x,
                 const std::vector<float>& grad, uint64_t seed) {
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> d = random_vector(x.size(), seed * 10 + k);
    const double fd = directional_fd(f, x.data(), d, kEps);
    const double an = dot(grad.data(), d);
    EXPECT_NEAR(fd, an, kRelTol * std::max(1.0, std::fabs(an))) << what << " direction " << k;
  }
}

TEST(KernelGradients, Matmul) {
  const int N = 6, C = 5, OC = 7;
  auto inp = random_vector(N * C, 1), w = random_vector(C * OC, 2), bias = random_vector(OC, 3);
  const auto r = random_vector(N * OC, 4);
  std::vector<float> out(N * OC);
  auto f = [&] {
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return weighted_sum(out, r);
  };
  std::vector<float> dinp(N * C), dw(C * OC, 0.0f), dbias(OC, 0.0f);
  cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), r.data(), inp.data(), w.data(), N, C, OC);
  expect_grad("inp", f, inp, dinp, 5);
  expect_grad("w", f, w, dw, 6);
  expect_grad("bias", f, bias, dbias, 7);
}

TEST(KernelGradients, MatmulAccumulatesWeightGrads) {
  const int N = 4, C = 3, OC = 2;
  auto inp = random_vector(N * C, 1), w = random_vector(C * OC, 2), dout = random_vector(N * OC, 3);
  std::vector<float> once(C * OC, 0.0f), twice(C * OC, 0.0f), bonce(OC, 0.0f), btwice(OC, 0.0f);
  cpu::matmul_backward(nullptr, once.data(), bonce.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  for (int i = 0; i < 2; ++i) {
    cpu::matmul_backward(nullptr, twice.data(), btwice.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  }
  for (int i = 0; i < C * OC; ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  for (int i = 0; i < OC; ++i) EXPECT_FLOAT_EQ(btwice[i], 2 * bonce[i]);
}

TEST(KernelGradients, LayerNorm) {
  const int N = 5, C = 8;
  auto inp = random_vector(N * C, 11), w = random_vector(C, 12), b = random_vector(C, 13);
  const auto r = random_vector(N * C, 14);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto f = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return weighted_sum(out, r);
  };
  f();
  std::vector<float> dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  expect_grad("inp", f, inp, dinp, 15);
  expect_grad("w", f, w, dw, 16);
  expect_grad("b", f, b, db, 17);
}

// Multi-head, and grouped-query with two query heads a key and value head.
TEST(KernelGradients, Attention) {
  for (const int KV : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << KV << " key and value heads");
    const int B = 2, T = 5, C = 8, NH = 2, W = C + 2 * KV * (C / NH);
    auto qkv = random_vector(B * T * W, 21);
    const auto r = random_vector(B * T * C, 22);
    std::vector<float> out(B * T * C), stats(B * NH * T * 2), scratch(cpu::attention_scratch_floats(T));
    auto f = [&] {
      cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV);
      return weighted_sum(out, r);
    };
    f();
    std::vector<float> dqkv(qkv.size());
    cpu::attention_backward(dqkv.data(), r.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                            DType::kF32);
    expect_grad("qkv", f, qkv, dqkv, 23);
    // Causality: the output at position t must not depend on any later key or value.
    f();  // the finite differences left `out` at a perturbed input
    const std::vector<float> before = out;
    for (int c = C; c < W; ++c) qkv[(0 * T + T - 1) * W + c] += 1.0f;  // last position's k, v
    f();
    for (int t = 0; t < T - 1; ++t) {
      for (int c = 0; c < C; ++c) EXPECT_EQ(out[t * C + c], before[t * C + c]) << "t " << t;
    }
  }
}

// Attention in double from its definition: out = softmax(QK^T / sqrt(hs),
// causal) V and, for the gradient dout, dqkv by the chain rule; query head
// h reads key and value head h / (NH / KV).
struct NaiveAttention {
  std::vector<double> out, dqkv;
  NaiveAttention(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH, int KV)
      : out(int64_t(B) * T * C), dqkv(qkv.size()) {
    const int hs = C / NH;
    const int64_t W = C + 2 * int64_t(KV) * hs;
    const double scale = 1.0 / std::sqrt(double(hs));
    auto at = [&](int b, int t, int part, int h, int d) {
      const int head = part == 0 ? h : h / (NH / KV);
      return (int64_t(b) * T + t) * W + (part == 0 ? 0 : C + (part - 1) * int64_t(KV) * hs) + head * hs + d;
    };
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          std::vector<double> p(t + 1), dp(t + 1);
          double mx = -INFINITY, z = 0.0, D = 0.0;
          for (int s = 0; s <= t; ++s) {
            for (int d = 0; d < hs; ++d) p[s] += double(qkv[at(b, t, 0, h, d)]) * qkv[at(b, s, 1, h, d)];
            p[s] *= scale;
            mx = std::max(mx, p[s]);
          }
          for (int s = 0; s <= t; ++s) z += p[s] = std::exp(p[s] - mx);
          const float* dy = dout.data() + (int64_t(b) * T + t) * C + h * hs;
          for (int s = 0; s <= t; ++s) {
            p[s] /= z;
            for (int d = 0; d < hs; ++d) {
              out[(int64_t(b) * T + t) * C + h * hs + d] += p[s] * qkv[at(b, s, 2, h, d)];
              dp[s] += dy[d] * qkv[at(b, s, 2, h, d)];
              dqkv[at(b, s, 2, h, d)] += p[s] * dy[d];
            }
            D += p[s] * dp[s];
          }
          for (int s = 0; s <= t; ++s) {
            const double ds = p[s] * (dp[s] - D) * scale;
            for (int d = 0; d < hs; ++d) {
              dqkv[at(b, t, 0, h, d)] += ds * qkv[at(b, s, 1, h, d)];
              dqkv[at(b, s, 1, h, d)] += ds * qkv[at(b, t, 0, h, d)];
            }
          }
        }
      }
    }
  }
};

// Long sequences take their query rows in blocks (over the keys the rows
// see) so that attention's memory is linear in T: every blocking gives
// attention in double within fp32 rounding, and a sequence of 2048 or
// fewer is one block, the whole T x T products.
TEST(Attention, QueryRowsInBlocksGiveAttentionInDouble) {
  EXPECT_EQ(cpu::attention_block_rows(1024), 1024);
  EXPECT_EQ(cpu::attention_block_rows(2048), 2048);
  EXPECT_EQ(cpu::attention_block_rows(4096), 1024);
  EXPECT_EQ(cpu::attention_block_rows(8192), 512);
  EXPECT_EQ(cpu::attention_scratch_floats(8192, 3), 2 * 3 * 512 * 8192);
  const int B = 2, T = 37, C = 24;
  for (const auto& [NH, KV] : {std::pair(3, 3), std::pair(4, 2), std::pair(4, 1)}) {
    const int W = C + 2 * KV * (C / NH);
    const auto qkv = random_vector(B * T * W, 71), dout = random_vector(B * T * C, 72);
    const NaiveAttention want(qkv, dout, B, T, C, NH, KV);
    for (int rows : {T, 8, 1}) {
      SCOPED_TRACE(::testing::Message() << NH << " heads over " << KV << ", " << rows << " rows a block");
      std::vector<float> out(B * T * C, 7.0f), stats(B * NH * T * 2), dqkv(qkv.size(), 7.0f),
          scratch(2 * int64_t(omp_get_max_threads()) * rows * T);
      cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV, rows);
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                              DType::kF32, rows);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], want.out[i], 1e-5 * (1 + std::fabs(want.out[i]))) << i;
      }
      for (size_t i = 0; i < dqkv.size(); ++i) {
        ASSERT_NEAR(dqkv[i], want.dqkv[i], 1e-5 * (1 + std::fabs(want.dqkv[i]))) << i;
      }
    }
  }
}

// Positions restarting at each document's first row.
std::vector<int32_t> packed_positions(const std::vector<std::vector<int>>& docs) {
  std::vector<int32_t> pos;
  for (const auto& sequence : docs) {
    for (int len : sequence) {
      for (int i = 0; i < len; ++i) pos.push_back(i);
    }
  }
  return pos;
}

// Packed sequences: each document's rows of out, stats and dqkv are
// those of the document run alone as a sequence of its own, bit for bit
// (a query sees no other document's keys, nor does a gradient cross), at
// every blocking; and with a row of each document's dout perturbed, no
// other document's dqkv moves.
TEST(Attention, PackedDocumentsAreAttendedAsSequencesOfTheirOwn) {
  const int T = 23, C = 24;
  const std::vector<std::vector<int>> docs = {{5, 1, 17}, {23}, {7, 7, 9}};
  const int B = static_cast<int>(docs.size());
  const std::vector<int32_t> pos = packed_positions(docs);
  for (const auto& [NH, KV] : {std::pair(3, 3), std::pair(4, 2), std::pair(4, 1)}) {
    const int W = C + 2 * KV * (C / NH);
    const auto qkv = random_vector(B * T * W, 75), dout = random_vector(B * T * C, 76);
    for (int rows : {T, 4}) {
      SCOPED_TRACE(::testing::Message() << NH << " heads over " << KV << ", " << rows << " rows a block");
      std::vector<float> out(B * T * C, 7.0f), stats(B * NH * T * 2, 7.0f), dqkv(qkv.size(), 7.0f),
          scratch(2 * int64_t(omp_get_max_threads()) * rows * T);
      cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV, rows, pos.data());
      cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                              DType::kF32, rows, pos.data());
      for (int b = 0; b < B; ++b) {
        int t0 = 0;
        for (int L : docs[b]) {
          const int64_t r0 = int64_t(b) * T + t0;
          const std::vector<float> dq(qkv.begin() + r0 * W, qkv.begin() + (r0 + L) * W),
              ddy(dout.begin() + r0 * C, dout.begin() + (r0 + L) * C);
          std::vector<float> o(L * C), st(NH * L * 2), dd(L * W);
          cpu::attention_forward(o.data(), st.data(), scratch.data(), dq.data(), 1, L, C, NH, KV, std::min(rows, L));
          cpu::attention_backward(dd.data(), ddy.data(), dq.data(), st.data(), scratch.data(), 1, L, C, NH, KV,
                                  DType::kF32, std::min(rows, L));
          for (int64_t i = 0; i < int64_t(L) * C; ++i) ASSERT_EQ(out[r0 * C + i], o[i]) << b << " " << t0 << " " << i;
          for (int64_t i = 0; i < int64_t(L) * W; ++i) ASSERT_EQ(dqkv[r0 * W + i], dd[i]) << b << " " << t0 << " " << i;
          for (int h = 0; h < NH; ++h) {
            for (int t = 0; t < 2 * L; ++t) {
              ASSERT_EQ(stats[(int64_t(b) * NH + h) * 2 * T + 2 * t0 + t], st[h * 2 * L + t]);
            }
          }
          t0 += L;
        }
      }
    }
  }
}

// The backward rounds the probabilities it recomputes to the activations'
// type: as if the forward had saved them in bf16.
TEST(Attention, TheBackwardTakesTheProbabilitiesAtTheRoundedTypesValues) {
  const int B = 1, T = 9, C = 8, NH = 2;
  const auto qkv = random_vector(B * T * 3 * C, 73), dout = random_vector(B * T * C, 74);
  std::vector<float> out(B * T * C), stats(B * NH * T * 2), scratch(cpu::attention_scratch_floats(T));
  cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, NH);
  std::vector<float> f32(qkv.size()), bf16(qkv.size());
  cpu::attention_backward(f32.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, NH,
                          DType::kF32);
  cpu::attention_backward(bf16.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, NH,
                          DType::kBF16);
  // dV = P^T dY in double from bf16 probabilities: P from the statistics.
  const int hs = C / NH;
  int differ = 0;
  for (int h = 0; h < NH; ++h) {
    for (int s = 0; s < T; ++s) {
      for (int d = 0; d < hs; ++d) {
        double dv = 0.0;
        for (int t = s; t < T; ++t) {
          double score = 0.0;
          for (int e = 0; e < hs; ++e) score += double(qkv[t * 3 * C + h * hs + e]) * qkv[s * 3 * C + C + h * hs + e];
          const float* st = stats.data() + (h * T + t) * 2;
          const float p = std::exp(float(score / std::sqrt(double(hs))) - st[0]) * st[1];
          dv += double(bf16_to_float(float_to_bf16(p))) * dout[t * C + h * hs + d];
        }
        const int64_t i = s * 3 * C + 2 * C + h * hs + d;
        ASSERT_NEAR(bf16[i], dv, 1e-5 * (1 + std::fabs(dv))) << "dv " << i;
        differ += bf16[i] != f32[i];
      }
    }
  }
  EXPECT_GT(differ, 0);
}

TEST(KernelGradients, Gelu) {
  const int n = 50;
  auto inp = random_vector(n, 31, 2.0);
  const auto r = random_vector(n, 32);
  std::vector<float> out(n);
  auto f = [&] {
    cpu::gelu_forward(out.data(), inp.data(), n);
    return weighted_sum(out, r);
  };
  std::vector<float> dinp(n);
  cpu::gelu_backward(dinp.data(), inp.data(), r.data(), n);
  expect_grad("inp", f, inp, dinp, 33);
  // Known values of the tanh approximation.
  std::vector<float> x = {0.0f, 1.0f, -1.0f}, y(3);
  cpu::gelu_forward(y.data(), x.data(), 3);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 0.841192, 1e-6);
  EXPECT_NEAR(y[2], -0.158808, 1e-6);
}

TEST(KernelGradients, Embedding) {
  const int B = 2, T = 4, C = 3, V = 5;
  const std::vector<int32_t> tokens = {1, 3, 1, 0, 4, 4, 2, 1};  // repeats exercise accumulation
  auto wte = random_vector(V * C, 41), wpe = random_vector(T * C, 42);
  const auto r = random_vector(B * T * C, 43);
  std::vector<float> out(B * T * C);
  auto f = [&] {
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(out, r);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  cpu::embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  expect_grad("wte", f, wte, dwte, 44);
  expect_grad("wpe", f, wpe, dwpe, 45);
}

TEST(KernelGradients, SoftmaxCrossEntropy) {
  const int rows = 4, V = 9;
  auto logits = random_vector(rows * V, 51, 2.0);
  const std::vector<int32_t> targets = {0, 8, -1, 3};  // -1: left out by a loss mask
  std::vector<double> losses(rows, std::nan(""));      // every row's is written
  auto f = [&] {
    std::vector<float> z = logits;
    cpu::softmax_cross_entropy(z.data(), losses.data(), targets.data(), rows, V, 0.0f);
    double s = 0;
    for (double l : losses) s += l;
    return s;
  };
  // Loss against the definition -log(exp(z_t) / sum exp(z)).
  f();
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[r * V + v]));
    const double want = targets[r] < 0 ? 0.0 : -std::log(std::exp(double(logits[r * V + targets[r]])) / sum);
    EXPECT_NEAR(losses[r], want, 1e-6);
  }
  std::vector<float> grad = logits;
  cpu::softmax_cross_entropy(grad.data(), losses.data(), targets.data(), rows, V, 1.0f);
  expect_grad("logits", f, logits, grad, 52);
  for (int v = 0; v < V; ++v) EXPECT_EQ(grad[2 * V + v], 0.0f);
}

// cpu::sum_squares's order (ops/sum_squares.h) written out plainly: 256 lanes
// per chunk of 65536 elements, each lane summing every 256th square, the
// lanes combined by a pairwise tree; the chunks' partials the same way.
double lanes_tree(std::vector<double> lane) {
  for (int stride = 128; stride >= 1; stride /= 2) {
    for (int t = 0; t < stride; ++t) lane[t] = lane[t] + lane[t + stride];
  }
  return lane[0];
}
double ordered_sum_squares(const std::vector<float>& x) {
  static_assert(cpu::kSquaresChunk == 65536 && cpu::kSquaresLanes == 256);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> partial;
  for (int64_t lo = 0; lo < n; lo += 65536) {
    const int64_t hi = std::min(lo + 65536, n);
    std::vector<double> lane(256, 0.0);
    for (int t = 0; t < 256; ++t) {
      for (int64_t i = lo + t; i < hi; i += 256) {
        lane[t] = lane[t] + static_cast<double>(x[i]) * static_cast<double>(x[i]);
      }
    }
    partial.push_back(lanes_tree(lane));
  }
  std::vector<double> lane(256, 0.0);
  for (int t = 0; t < 256; ++t) {
    for (size_t c = t; c < partial.size(); c += 256) lane[t] = lane[t] + partial[c];
  }
  return lanes_tree(lane);
}

// Bit for bit the order above, and within 1e-12 relative of the sum in long
// double (the order rounds at most about 280 times along any term's path,
// 3e-14). The largest size has over 256 chunks: the partials' lanes wrap.
// Dropout keeps each element with probability 1 - p, scaled by 1/(1 - p),
// by a mask that is the seed's alone: the same for any length and in place,
// another for another seed.
TEST(Pointwise, DropoutKeepsTheStatedFractionByTheSeedsMask) {
  const int64_t n = 1 << 20;
  const float p = 0.25f;
  const std::vector<float> x = testing::random_vector(n, 8);
  std::vector<float> y(n), z(n), prefix(1000), in_place = x;
  cpu::dropout(y.data(), x.data(), n, p, 7);
  cpu::dropout(z.data(), x.data(), n, p, 8);
  cpu::dropout(prefix.data(), x.data(), 1000, p, 7);
  cpu::dropout(in_place.data(), in_place.data(), n, p, 7);
  int64_t kept = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(y[i] == 0.0f || y[i] == x[i] / (1.0f - p)) << i;
    kept += y[i] != 0.0f;
    differ += (y[i] != 0.0f) != (z[i] != 0.0f);
  }
  // Within 5 standard deviations of the binomial's mean.
  const double sd = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(double(kept), n * (1 - p), 5 * sd);
  EXPECT_NEAR(double(differ), n * 2 * p * (1 - p), 5 * std::sqrt(n * 0.375 * 0.625));
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), y.begin()));
  EXPECT_EQ(testing::bits(in_place), testing::bits(y));
  std::vector<float> none(n);
  cpu::dropout(none.data(), x.data(), n, 0.0f, 7);
  EXPECT_EQ(testing::bits(none), testing::bits(x));

  // dropout_add in one pass: acc + x' element by element, the same mask.
  const std::vector<float> acc = testing::random_vector(n, 9);
  std::vector<float> summed = acc, expected(n);
  cpu::dropout_add(summed.data(), x.data(), n, p, 7);
  for (int64_t i = 0; i < n; ++i) expected[i] = acc[i] + y[i];
  EXPECT_EQ(testing::bits(summed), testing::bits(expected));
}

TEST(Reductions, SumSquaresIsTheLanesOrder) {
  for (int64_t n : {0, 1, 255, 256, 257, 65535, 65536, 65537, 3000017, 257 * 65536 + 4097}) {
    SCOPED_TRACE(n);
    const auto x = random_vector(n, 61 + n);
    const double got = cpu::sum_squares(x.data(), n);
    EXPECT_EQ(got, ordered_sum_squares(x));
    long double exact = 0;
    for (float v : x) exact += static_cast<long double>(v) * v;
    EXPECT_NEAR(got, static_cast<double>(exact), 1e-12 * static_cast<double>(exact));
  }
}

// The tiled product against a loop in double, within fp32's rounding over K
// terms; and the same bits at 1, 2 and 3 threads, called alone or from
// inside a parallel region, for every transposition and shapes with tiles
// cut at their edges.
TEST(Gemm, MatchesADoubleLoopWithTheSameBitsAtAnyThreadCount) {
  struct Shape {
    int64_t M, N, K;
  };
  const int threads_before = omp_get_max_threads();
  for (const Shape s : {Shape{1, 1, 1}, Shape{65, 130, 7}, Shape{1024, 200, 96}, Shape{1100, 1030, 33}}) {
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      SCOPED_TRACE(::testing::Message() << s.M << "x" << s.N << "x" << s.K << " ta " << ta << " tb " << tb);
      const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 2;
      const auto a = random_vector((ta ? s.K : s.M) * lda, 7), b = random_vector((tb ? s.N : s.K) * ldb, 8);
      const auto c0 = random_vector(s.M * ldc, 9);
      auto at = [&](int64_t i, int64_t k) { return ta ? a[k * lda + i] : a[i * lda + k]; };
      auto bt = [&](int64_t k, int64_t j) { return tb ? b[j * ldb + k] : b[k * ldb + j]; };
      auto product = [&](int threads, bool nested) {
        std::vector<float> c = c0;
        omp_set_num_threads(threads);
        if (nested) {
#pragma omp parallel num_threads(2)
          if (omp_get_thread_num() == 0) {
            cpu::sgemm(ta, tb, s.M, s.N, s.K, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
          }
        } else {
          cpu::sgemm(ta, tb, s.M, s.N, s.K, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
        }
        return c;
      };
      const std::vector<float> one = product(1, false);
      for (int64_t i = 0; i < s.M; i += std::max<int64_t>(1, s.M / 17)) {
        for (int64_t j = 0; j < s.N; j += std::max<int64_t>(1, s.N / 13)) {
          double want = 2.0 * c0[i * ldc + j], scale = std::fabs(want);
          for (int64_t k = 0; k < s.K; ++k) {
            want += 0.5 * at(i, k) * bt(k, j);
            scale += std::fabs(0.5 * at(i, k) * bt(k, j));
          }
          ASSERT_NEAR(one[i * ldc + j], want, 1e-6 * (s.K + 2) * scale) << i << ", " << j;
        }
      }
      EXPECT_EQ(product(2, false), one);
      EXPECT_EQ(product(3, false), one);
      EXPECT_EQ(product(2, true), one);
    }
  }
  omp_set_num_threads(threads_before);
}

}  // namespace
}  // namespace zerod
