// The CUDA kernel table against the CPU's on random inputs, on the GPU
// (skipped, saying so, where there is none), for fp32 and bf16 operands.
// Inputs are rounded to the operand type first, so that both tables take
// the same values.
//
// Tolerances, relative to each output's largest magnitude. fp32 operands:
// matrix products and everything downstream of them (cuBLASLt and OpenBLAS
// sum in different orders) 1e-5, about 80 fp32 ulps, enough for inner
// dimensions of a few hundred; GELU, and the sums the GPU splits among
// threads (LayerNorm's rows over a warp, the bias and LayerNorm gradients'
// columns in chunks of rows), 1e-6; attention 1e-5. bf16 operands: each
// output is rounded once to bf16 (half an ulp, 2^-9 of itself) after fp32
// arithmetic on the same values, so 2^-8 of the largest; fp32 outputs (the
// weight gradients, statistics) keep the fp32 tolerances, as their sums
// take the same bf16 values in fp32; attention, whose products run at
// tf32 for a 16-bit job, 1e-2; the head's gradients, which the GPU
// computes from bf16 logit gradients where the CPU keeps them fp32, 1e-2.
// Exact: the casts, additions, scaling and dropout (the same fp32
// operation, then one rounding), the embedding (same order of the same fp32
// adds), the sums in double, and both optimizers (the same operations,
// unfused).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/kernels.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/model/gpt.h"
#include "runtime/model/rope.h"
#include "tests/cuda_rig.h"
#include "tests/float_compare.h"
#include "tests/packed_positions.h"

namespace zerod {
namespace {

using testing::bits;
using testing::expect_close;
using testing::randn;
using testing::row_tol;

constexpr DType kOperandTypes[] = {DType::kF32, DType::kBF16};
constexpr float kBf16Output = 0x1p-8f;

// An operand output's tolerance: `f32` for fp32 operands, one bf16
// rounding for bf16.
float tol(DType t, float f32) { return t == DType::kF32 ? f32 : kBf16Output; }

// The fp32 values rounded to t: what an exact fp32 operation gives in t.
std::vector<float> rounded(DType t, std::vector<float> v) {
  round_to(t, v.data(), v.size());
  return v;
}

class CudaTable : public testing::CudaTest {
 protected:
  // Attention forward and backward of qkv and dout (as operands of t) on
  // k, and on the CPU from the operands the GPU was given: out and dqkv,
  // the GPU's first. pos: packed sequences' positions, null for none.
  struct AttentionResults {
    std::vector<float> out, dqkv, cpu_out, cpu_dqkv;
  };
  AttentionResults attention_both(Kernels& k, DType t, std::vector<float> qkv, std::vector<float> dout, int B, int T,
                                  int C, int NH, int KV, const std::vector<int32_t>* pos = nullptr) {
    const int64_t N = int64_t(B) * T, W = C + 2 * int64_t(KV) * (C / NH);
    AttentionResults r{{}, {}, std::vector<float>(N * C), std::vector<float>(N * W)};
    void* g_out = up_as(t, r.cpu_out);
    float* g_lse = up(std::vector<float>(int64_t(B) * NH * T));
    float* g_scratch = up(std::vector<float>(k.attention_scratch_floats(B, T, C, NH)));
    void* g_dqkv = up_as(t, r.cpu_dqkv);
    const void *g_qkv = up_as(t, qkv), *g_dout = up_as(t, dout);
    const int32_t* g_pos = pos ? up(*pos) : nullptr;
    k.attention_forward(s(), g_out, g_lse, g_scratch, g_qkv, B, T, C, NH, KV, g_pos);
    k.attention_backward(s(), g_dqkv, g_dout, g_qkv, g_out, g_lse, g_scratch, B, T, C, NH, KV, DType::kF32, g_pos);
    r.out = down_as(t, g_out, r.cpu_out.size());
    r.dqkv = down_as(t, g_dqkv, r.cpu_dqkv.size());
    std::vector<float> stats(int64_t(B) * NH * T * 2), scratch(cpu::attention_scratch_floats(T));
    // qkv and dout hold the operands' values now (up_as).
    const int32_t* p = pos ? pos->data() : nullptr;
    cpu::attention_forward(r.cpu_out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV, p);
    cpu::attention_backward(r.cpu_dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                            DType::kF32, p);
    return r;
  }

  // k's residual_layernorm_forward in place over g_x (x's operands) with
  // y against the CPU: the sum rounded to t bit for bit, then its
  // LayerNorm; out, mean and rstd are the device's buffers for them.
  void expect_residual_layernorm(Kernels& k, DType t, void* g_x, const std::vector<float>& x, const void* g_y,
                                 const std::vector<float>& y, const void* g_w, const std::vector<float>& w,
                                 const void* g_b, const std::vector<float>& b, void* g_out, float* g_mean,
                                 float* g_rstd, int64_t N, int C) {
    k.residual_layernorm_forward(s(), g_x, g_out, g_mean, g_rstd, g_x, g_y, g_w, g_b, N, C);
    std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N);
    cpu::residual_forward(sum.data(), x.data(), y.data(), N * C);
    sum = rounded(t, sum);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), w.data(), b.data(), N, C);
    EXPECT_EQ(bits(down_as(t, g_x, sum.size())), bits(sum));
    expect_close(down_as(t, g_out, out.size()), out, tol(t, row_tol(C)), "residual + layernorm out");
    expect_close(down(g_rstd, N), rstd, row_tol(C), "residual + layernorm rstd");
  }
};

TEST_F(CudaTable, TablesTakeOperandsOfTheirPrecisionOnly) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) EXPECT_EQ(table(t)->operand_type(), t);
  auto refused = kernels_for(*gpu_, DType::kI8);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("int8"), std::string::npos) << refused.status();
  // A model computes in its table's type, or in any on fp32 operands.
  const GptConfig cfg{2, 4, 64, 96, 32};
  auto bf16 = table(DType::kBF16);
  auto model = Gpt::create(cfg, 2, 32, DType::kF16, false, *gpu_, *bf16);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("fp16"), std::string::npos) << model.status();
  EXPECT_TRUE(Gpt::create(cfg, 2, 32, DType::kBF16, false, *gpu_, *bf16).ok());
  EXPECT_TRUE(Gpt::create(cfg, 2, 32, DType::kF16, false, *gpu_, *k_).ok());
}

TEST_F(CudaTable, MatrixProductsWithBiasOrGeluAndTheirGradients) {
  const int64_t N = 96;
  const int C = 160, OC = 72;
  for (DType t : kOperandTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto k = table(t);
    auto inp = randn(N * C, 1), w = randn(int64_t(C) * OC, 2, 0.1f), bias = randn(OC, 3), dout = randn(N * OC, 4);
    std::vector<float> out(N * OC), dinp(N * C), dw = randn(int64_t(C) * OC, 5), dbias = randn(OC, 6);
    void* g_out = up_as(t, out);
    void* g_dinp = up_as(t, dinp);
    float* g_dw = up(dw);
    float* g_dbias = up(dbias);
    const void *g_inp = up_as(t, inp), *g_w = up_as(t, w), *g_bias = up_as(t, bias), *g_dout = up_as(t, dout);
    k->matmul_forward(s(), g_out, g_inp, g_w, g_bias, N, C, OC);
    k->matmul_backward(s(), g_dinp, g_dw, g_dbias, g_dout, g_inp, g_w, N, C, OC);
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    expect_close(down_as(t, g_out, out.size()), out, tol(t, 1e-5f), "out");
    expect_close(down_as(t, g_dinp, dinp.size()), dinp, tol(t, 1e-5f), "dinp");
    expect_close(down(g_dw, dw.size()), dw, 1e-5f, "dw");
    expect_close(down(g_dbias, dbias.size()), dbias, 1e-6f, "dbias");
    // Without a bias the product alone.
    k->matmul_forward(s(), g_out, g_inp, g_w, nullptr, N, C, OC);
    cpu::matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
    expect_close(down_as(t, g_out, out.size()), out, tol(t, 1e-5f), "out without bias");

    // The product and its GELU (out = gelu(pre)), and the backward through
    // the GELU of an input gelu(pre_in): for bf16 cuBLASLt's epilogues, on
    // the fp32 product, each output rounded once; where cuBLASLt has no
    // epilogue for the shape, the two ops, the product rounded before the
    // GELU (two roundings, the GELU's slope under 1.13: 2^-7 covers both).
    // fp32 operands take the two ops. Weight and bias gradients accumulate
    // on the ones above.
    auto pre_in = randn(N * C, 25);
    std::vector<float> pre(N * OC);
    void* g_pre = up_as(t, pre);
    const void* g_pre_in = up_as(t, pre_in);
    const int64_t before = k->launches();
    k->matmul_gelu_forward(s(), g_out, g_pre, g_inp, g_w, g_bias, N, C, OC);
    const int64_t forward = k->launches() - before;
    k->matmul_backward_gelu(s(), g_dinp, g_dw, g_dbias, g_dout, g_pre_in, g_inp, g_w, N, C, OC);
    // The epilogue saves the GELU's launch each way: one product forward;
    // backward two products and the bias gradient's two launches.
    EXPECT_EQ(forward, t == DType::kF32 ? 2 : 1) << "a GELU epilogue for bf16 on this GPU";
    EXPECT_EQ(k->launches() - before - forward, t == DType::kF32 ? 5 : 4);
    cpu::matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    cpu::gelu_forward(out.data(), pre.data(), N * OC);
    cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    cpu::gelu_backward(dinp.data(), pre_in.data(), dinp.data(), N * C);
    const float two_roundings = t == DType::kF32 ? 1e-5f : 0x1p-7f;
    expect_close(down_as(t, g_pre, pre.size()), pre, tol(t, 1e-5f), "pre");
    expect_close(down_as(t, g_out, out.size()), out, two_roundings, "gelu(pre)");
    expect_close(down_as(t, g_dinp, dinp.size()), dinp, two_roundings, "dpre");
    expect_close(down(g_dw, dw.size()), dw, 1e-5f, "dw, accumulated");
    expect_close(down(g_dbias, dbias.size()), dbias, 1e-6f, "dbias, accumulated");
  }
}

// LoRA's products on an adapter's columns [c0, c0 + out) of a wider
// product (rows ld apart): one cuBLASLt product each (two for the up
// product's backward), the scale and the sums in the product, each against
// the CPU's ops from the operands the GPU took (its u and du, downloaded):
// an output rounded once. The other columns keep their bits.
TEST_F(CudaTable, LorasProductsAreOneProductEachOnTheirColumns) {
  const int64_t N = 64, ld = 96, c0 = 32;
  const int in = 80, r = 8, out = 40;
  const float scale = 2.0f;
  for (DType t : kOperandTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto k = table(t);
    auto x = randn(N * in, 70), a = randn(int64_t(in) * r, 71, 0.2f), b = randn(int64_t(r) * out, 72, 0.2f),
         y = randn(N * ld, 73), dy = randn(N * ld, 74), dx = randn(N * in, 75);
    std::vector<float> db = randn(int64_t(r) * out, 76), u(N * r), du(N * r);
    const void *g_x = up_as(t, x), *g_a = up_as(t, a), *g_b = up_as(t, b), *g_dy = up_as(t, dy);
    void *g_y = up_as(t, y), *g_dx = up_as(t, dx), *g_u = up_as(t, u), *g_du = up_as(t, du);
    float* g_db = up(db);
    const int64_t before = k->launches();
    k->lora_down(s(), g_u, g_x, g_a, N, in, r, scale);
    k->lora_up(s(), g_y, ld, c0, g_u, g_b, N, r, out, nullptr);
    k->lora_up_backward(s(), g_du, g_db, g_dy, ld, c0, g_u, g_b, N, r, out, scale, nullptr);
    k->lora_down_backward(s(), g_dx, g_du, g_a, N, in, r, nullptr);
    EXPECT_EQ(k->launches() - before, 5);

    std::vector<float> want_u(N * r), t_out(N * out), dy_cols(N * out), want_du(N * r), t_in(N * in);
    cpu::matmul_forward(want_u.data(), x.data(), a.data(), nullptr, N, in, r);
    for (float& v : want_u) v *= scale;
    const std::vector<float> got_u = down_as(t, g_u, u.size());
    expect_close(got_u, want_u, tol(t, 1e-5f), "u");
    cpu::matmul_forward(t_out.data(), got_u.data(), b.data(), nullptr, N, r, out);
    std::vector<float> want_y = y;
    for (int64_t n = 0; n < N; ++n) {
      for (int o = 0; o < out; ++o) want_y[n * ld + c0 + o] += t_out[n * out + o];
    }
    const std::vector<float> got_y = down_as(t, g_y, y.size());
    expect_close(got_y, want_y, tol(t, 1e-5f), "y");
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < ld; ++c) {
        if (c < c0 || c >= c0 + out) ASSERT_EQ(bits({got_y[n * ld + c]}), bits({y[n * ld + c]})) << n << ", " << c;
      }
    }
    for (int64_t n = 0; n < N; ++n) std::copy_n(dy.begin() + n * ld + c0, out, dy_cols.begin() + n * out);
    cpu::matmul_backward(want_du.data(), db.data(), nullptr, dy_cols.data(), got_u.data(), b.data(), N, r, out);
    for (float& v : want_du) v *= scale;
    const std::vector<float> got_du = down_as(t, g_du, du.size());
    expect_close(got_du, want_du, tol(t, 1e-5f), "du");
    expect_close(down(g_db, db.size()), db, 1e-5f, "dB, accumulated");
    cpu::matmul_backward(t_in.data(), nullptr, nullptr, got_du.data(), nullptr, a.data(), N, in, r);
    std::vector<float> want_dx = dx;
    for (int64_t i = 0; i < N * in; ++i) want_dx[i] += t_in[i];
    expect_close(down_as(t, g_dx, dx.size()), want_dx, tol(t, 1e-5f), "dx, accumulated");
  }
}

// C = 96 rows go 16 bytes a lane; C = 74 is not whole vectors of bf16 or
// fp32 and takes the one-element path (and the residual before LayerNorm
// the two ops).
TEST_F(CudaTable, LayerNormGeluResidualAndAdd) {
  // 38 chunks of 16 rows for the parameters' gradients, more than a
  // warp's lanes total, the last partial. Rows a warp holds in registers
  // forward, 4, 8 and 16 vectors a lane (96; gpt2-xl's 1600 and 4096 in
  // bf16, gpt2's 768 in fp32), rows too long to hold (4096 in fp32), and
  // rows that are not whole vectors (74).
  const int64_t N = 600;
  for (const auto& [t, C] : {std::pair{DType::kF32, 96}, std::pair{DType::kBF16, 96}, std::pair{DType::kF32, 74},
                             std::pair{DType::kBF16, 74}, std::pair{DType::kBF16, 1600}, std::pair{DType::kBF16, 4096},
                             std::pair{DType::kF32, 768}, std::pair{DType::kF32, 4096}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", C " << C);
    auto k = table(t);
    auto x = randn(N * C, 10, 2.0f), w = randn(C, 11), b = randn(C, 12), dout = randn(N * C, 13);
    std::vector<float> out(N * C), mean(N), rstd(N);
    void* g_out = up_as(t, out);
    float *g_mean = up(mean), *g_rstd = up(rstd);
    const void *g_x = up_as(t, x), *g_w = up_as(t, w), *g_b = up_as(t, b), *g_dout = up_as(t, dout);
    k->layernorm_forward(s(), g_out, g_mean, g_rstd, g_x, g_w, g_b, N, C);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    expect_close(down_as(t, g_out, out.size()), out, tol(t, row_tol(C)), "layernorm out");
    expect_close(down(g_rstd, N), rstd, row_tol(C), "layernorm rstd");
    auto dinp = randn(N * C, 14), dw = randn(C, 15), db = randn(C, 16);
    void* g_dinp = up_as(t, dinp);
    float *g_dw = up(dw), *g_db = up(db);
    k->layernorm_backward(s(), g_dinp, g_dw, g_db, g_dout, g_x, g_w, g_mean, g_rstd, N, C);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    expect_close(down_as(t, g_dinp, dinp.size()), dinp, tol(t, 1e-6f), "layernorm dinp");
    expect_close(down(g_dw, C), dw, 1e-6f, "layernorm dw");
    expect_close(down(g_db, C), db, 1e-6f, "layernorm db");
    // With the residual before it (fused where rows are whole vectors),
    // in place over a copy of x: the sum rounded, then its LayerNorm.
    std::vector<float> res = x;
    expect_residual_layernorm(*k, t, up_as(t, res), x, g_dout, dout, g_w, w, g_b, b, g_out, g_mean, g_rstd, N, C);

    const int64_t n = N * C;
    std::vector<float> y(n), dy(n), r(n);
    void *g_y = up_as(t, y), *g_dy = up_as(t, dy), *g_r = up_as(t, r);
    k->gelu_forward(s(), g_y, g_x, n);
    k->gelu_backward(s(), g_dy, g_x, g_dout, n);
    k->residual_forward(s(), g_r, g_x, g_dout, n);
    cpu::gelu_forward(y.data(), x.data(), n);
    cpu::gelu_backward(dy.data(), x.data(), dout.data(), n);
    cpu::residual_forward(r.data(), x.data(), dout.data(), n);
    expect_close(down_as(t, g_y, n), y, tol(t, 1e-6f), "gelu");
    expect_close(down_as(t, g_dy, n), dy, tol(t, 1e-6f), "gelu_backward");
    EXPECT_EQ(bits(down_as(t, g_r, n)), bits(rounded(t, r)));
  }
  // Gradient accumulation, in fp32.
  const int64_t n = 10007;
  const auto x = randn(n, 17), y = randn(n, 18);
  std::vector<float> r = x;
  float* g_r = up(r);
  k_->add(s(), g_r, up(y), n);
  for (int64_t i = 0; i < n; ++i) r[i] += y[i];
  EXPECT_EQ(bits(down(g_r, n)), bits(r));
}

// The Llama family's ops: RMSNorm (a warp a row, its weight's gradient
// in column chunks: LayerNorm's tolerances), SwiGLU and the rotary input
// with repeated key heads (one fp32 computation of the same values, then
// one rounding: bit for bit), the embedding without positions, and the
// column slices a LoRA of part of a fused product takes and adds.
TEST_F(CudaTable, RmsNormSwiGluRotaryInputAndPositionlessEmbedding) {
  const int64_t N = 600;
  const int T = 40, NH = 8, KV = 2, hd = 64, F = 176;  // N = 15 sequences of 40
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_head = NH;
  c.n_kv_head = KV;
  c.n_embd = NH * hd;
  const std::vector<float> rope = rope_table(c, T);
  const RopeShape rs{T, NH, KV, hd};
  c.n_embd = NH * 12;
  const std::vector<float> rope12 = rope_table(c, T);
  const RopeShape rs12{T, NH, KV, 12};
  // Rows held by a warp, rows read again (4104 bf16: 17 vectors a lane),
  // and rows not in whole vectors (74 fp32), element by element.
  for (const auto& [t, C] : {std::pair{DType::kF32, 96}, std::pair{DType::kBF16, 96}, std::pair{DType::kBF16, 2048},
                             std::pair{DType::kBF16, 4104}, std::pair{DType::kF32, 74}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", C " << C);
    auto k = table(t);
    auto x = randn(N * C, 60, 2.0f), w = randn(C, 61), dout = randn(N * C, 62);
    std::vector<float> out(N * C), rstd(N);
    void* g_out = up_as(t, out);
    float* g_rstd = up(rstd);
    const void *g_x = up_as(t, x), *g_w = up_as(t, w), *g_dout = up_as(t, dout);
    k->rmsnorm_forward(s(), g_out, g_rstd, g_x, g_w, N, C, 1e-5f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    expect_close(down_as(t, g_out, out.size()), out, tol(t, row_tol(C)), "rmsnorm out");
    expect_close(down(g_rstd, N), rstd, row_tol(C), "rmsnorm rstd");
    // The backward from the device's rstd, judged above: what is left is
    // its own arithmetic, and the CPU's serial fp32 sum of dw over the N
    // rows, off by about sqrt(N) roundings (1.6e-6 of the largest seen at
    // C 2048 on an H200).
    auto dinp = randn(N * C, 63), dw = randn(C, 64);
    void* g_dinp = up_as(t, dinp);
    float* g_dw = up(dw);
    k->rmsnorm_backward(s(), g_dinp, g_dw, g_dout, g_x, g_w, g_rstd, N, C);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), down(g_rstd, N).data(), N, C);
    expect_close(down_as(t, g_dinp, dinp.size()), dinp, tol(t, row_tol(C)), "rmsnorm dinp");
    expect_close(down(g_dw, C), dw, row_tol(N), "rmsnorm dw");
    // With the residual before it, in place over a copy of x: the sum
    // rounded, then its RMSNorm.
    std::vector<float> res = x, sum(N * C), rms(N);
    void* g_res = up_as(t, res);
    k->residual_rmsnorm_forward(s(), g_res, g_out, g_rstd, g_res, g_dout, g_w, N, C, 1e-5f);
    cpu::residual_forward(sum.data(), x.data(), dout.data(), N * C);
    sum = rounded(t, sum);
    cpu::rmsnorm_forward(out.data(), rms.data(), sum.data(), w.data(), N, C, 1e-5f);
    EXPECT_EQ(bits(down_as(t, g_res, sum.size())), bits(sum));
    expect_close(down_as(t, g_out, out.size()), out, tol(t, row_tol(C)), "residual + rmsnorm out");
    expect_close(down(g_rstd, N), rms, row_tol(C), "residual + rmsnorm rstd");
  }
  for (DType t : kOperandTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto k = table(t);
    // 16 bytes a thread (F 176), and an element a thread (F 20).
    for (const int f : {F, 20}) {
      auto gu = randn(N * 2 * f, 65, 2.0f), dy = randn(N * f, 66);
      std::vector<float> y(N * f), dgu(N * 2 * f);
      void *g_y = up_as(t, y), *g_dgu = up_as(t, dgu);
      const void* g_gu = up_as(t, gu);
      k->swiglu_forward(s(), g_y, g_gu, N, f);
      k->swiglu_backward(s(), g_dgu, g_gu, up_as(t, dy), N, f);
      cpu::swiglu_forward(y.data(), gu.data(), N, f);
      cpu::swiglu_backward(dgu.data(), gu.data(), dy.data(), N, f);
      // expf on the device and the host may differ by an ulp.
      expect_close(down_as(t, g_y, y.size()), rounded(t, y), tol(t, 1e-6f), "swiglu");
      expect_close(down_as(t, g_dgu, dgu.size()), rounded(t, dgu), tol(t, 1e-6f), "swiglu_backward");
    }

    // 16 bytes of each half a thread (hd 64), and a pair a thread (hd 12).
    for (const auto& [shape, table] : {std::pair(rs, rope), std::pair(rs12, rope12)}) {
      auto qkv = randn(N * shape.width(), 67), datt = randn(N * shape.width(), 68);
      // From the operands the GPU was given, in place.
      std::vector<float> att = rounded(t, qkv), dqkv = rounded(t, datt);
      void *g_att = up_as(t, qkv), *g_dqkv = up_as(t, datt);
      const float* g_table = up(table);
      k->rope_forward(s(), g_att, g_table, shape, N);
      k->rope_backward(s(), g_dqkv, g_table, shape, N);
      cpu::rope_forward(att.data(), table.data(), shape, N);
      cpu::rope_backward(dqkv.data(), table.data(), shape, N);
      EXPECT_EQ(bits(down_as(t, g_att, att.size())), bits(rounded(t, att)));
      EXPECT_EQ(bits(down_as(t, g_dqkv, dqkv.size())), bits(rounded(t, dqkv)));
    }

    const int B = 4, E = 64, V = 23;
    std::vector<int32_t> tokens(B * T), order(B * T);
    for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7 + 3) % V;
    token_order(tokens.data(), B * T, order.data());
    auto wte = randn(V * E, 69), demb = randn(B * T * E, 70);
    std::vector<float> emb(B * T * E);
    auto dwte = randn(V * E, 71);
    void* g_emb = up_as(t, emb);
    float* g_dwte = up(dwte);
    k->embedding_forward(s(), g_emb, up(tokens), up_as(t, wte), nullptr, B, T, E);
    k->embedding_backward(s(), g_dwte, nullptr, up_as(t, demb), up(tokens), up(order), B, T, E);
    cpu::embedding_forward(emb.data(), tokens.data(), wte.data(), nullptr, B, T, E);
    cpu::embedding_backward(dwte.data(), nullptr, demb.data(), tokens.data(), B, T, E);
    EXPECT_EQ(bits(down_as(t, g_emb, emb.size())), bits(emb));
    EXPECT_EQ(bits(down(g_dwte, dwte.size())), bits(dwte));

    // An adapter's columns of a fused product, taken out and added in.
    auto wide = randn(N * rs.width(), 72), part = randn(N * 2 * hd, 73);
    std::vector<float> taken(N * 2 * hd);
    void* g_wide = up_as(t, wide);
    void* g_taken = up_as(t, taken);
    k->take_columns(s(), g_taken, g_wide, rs.width(), rs.C(), N, 2 * hd);
    k->add_columns(s(), g_wide, rs.width(), rs.C(), up_as(t, part), N, 2 * hd);
    cpu::take_columns(taken.data(), wide.data(), rs.width(), rs.C(), N, 2 * hd);
    cpu::add_columns(wide.data(), rs.width(), rs.C(), part.data(), N, 2 * hd);
    EXPECT_EQ(bits(down_as(t, g_taken, taken.size())), bits(taken));
    EXPECT_EQ(bits(down_as(t, g_wide, wide.size())), bits(rounded(t, wide)));
  }
}

// C = 64 rows go 16 bytes a thread forward, C = 74 an element a thread.
TEST_F(CudaTable, EmbeddingForwardAndItsDeterministicBackward) {
  const int B = 4, T = 16, V = 23;  // tokens repeat
  std::vector<int32_t> tokens(B * T), order(B * T);
  std::mt19937 rng(5);
  // Token 0 at every third position besides: a run of at least 22 (more
  // than one scan of sixteen for its end).
  for (int i = 0; i < B * T; ++i) tokens[i] = i % 3 ? static_cast<int32_t>(rng() % V) : 0;
  token_order(tokens.data(), B * T, order.data());
  const int32_t *g_tokens = up(tokens), *g_order = up(order);
  for (const auto& [t, C] : {std::pair{DType::kF32, 64}, std::pair{DType::kBF16, 64}, std::pair{DType::kF32, 74},
                             std::pair{DType::kBF16, 74}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", C " << C);
    auto k = table(t);
    auto wte = randn(int64_t(V) * C, 20), wpe = randn(int64_t(T) * C, 21), dout = randn(int64_t(B) * T * C, 22);
    std::vector<float> out(int64_t(B) * T * C);
    auto dwte = randn(int64_t(V) * C, 23), dwpe = randn(int64_t(T) * C, 24);
    void* g_out = up_as(t, out);
    float *g_dwte = up(dwte), *g_dwpe = up(dwpe);
    k->embedding_forward(s(), g_out, g_tokens, up_as(t, wte), up_as(t, wpe), B, T, C);
    k->embedding_backward(s(), g_dwte, g_dwpe, up_as(t, dout), g_tokens, g_order, B, T, C);
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    EXPECT_EQ(bits(down_as(t, g_out, out.size())), bits(rounded(t, out)));
    EXPECT_EQ(bits(down(g_dwte, dwte.size())), bits(dwte));
    EXPECT_EQ(bits(down(g_dwpe, dwpe.size())), bits(dwpe));
  }
}

// T = 72: rows of scores not a whole number of warps; 1024 and 4096 at head
// widths 64 and 128, the presets' (4096: the CPU takes its query rows in
// blocks, the GPU a head a chunk); grouped-query attention at Llama-3.2-1B's
// 32 heads over 8 and two heads over one.
TEST_F(CudaTable, AttentionKeepsOnlyRowStatisticsAndMatchesTheCpu) {
  ASSERT_EQ(k_->attention_row_stats(), 1);
  struct Shape {
    int B, T, C, NH, KV;
  };
  for (const Shape& sh :
       {Shape{2, 72, 128, 2, 2}, Shape{1, 1024, 768, 12, 12}, Shape{1, 1024, 256, 2, 2}, Shape{1, 4096, 128, 2, 2},
        Shape{1, 4096, 256, 2, 2}, Shape{2, 72, 128, 2, 1}, Shape{1, 1024, 2048, 32, 8}}) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, KV = sh.KV;
    const int64_t N = int64_t(B) * T, W = C + 2 * int64_t(KV) * (C / NH);
    for (DType t : kOperandTypes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", T " << T << ", head width " << C / NH << ", " << NH
                                        << " heads over " << KV);
      auto k = table(t);
      const AttentionResults r = attention_both(*k, t, randn(N * W, 30), randn(N * C, 31), B, T, C, NH, KV);
      const float rel = t == DType::kF32 ? 1e-5f : 1e-2f;
      expect_close(r.out, r.cpu_out, rel, "attention out");
      expect_close(r.dqkv, r.cpu_dqkv, rel, "attention dqkv");
    }
  }
}

// Packed sequences (documents of 1, 7, 64 and 1000 in turn, up to T 8192):
// cuDNN's graphs with their document mask for bf16 (where the build has
// cuDNN they must run: a refusal, said on stderr, fails the test), the
// table's own attention with each row masked to its document for fp32,
// against the CPU's documents run as sequences of their own; twice, the
// same bits.
TEST_F(CudaTable, PackedAttentionKeepsToEachDocumentAsTheCpu) {
  struct Shape {
    int B, T, C, NH, KV;
  };
  for (const Shape& sh : {Shape{2, 1100, 256, 4, 2}, Shape{1, 8192, 128, 2, 1}}) {
    const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, KV = sh.KV;
    const int64_t N = int64_t(B) * T, W = C + 2 * int64_t(KV) * (C / NH);
    const std::vector<int32_t> pos = testing::packed_positions(B, T, {1, 7, 64, 1000});
    for (DType t : kOperandTypes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", T " << T << ", " << NH << " heads over " << KV);
      auto k = table(t);
      const auto qkv = randn(N * W, 34), dout = randn(N * C, 35);
      ::testing::internal::CaptureStderr();
      const AttentionResults r = attention_both(*k, t, qkv, dout, B, T, C, NH, KV, &pos);
      const AttentionResults again = attention_both(*k, t, qkv, dout, B, T, C, NH, KV, &pos);
      [[maybe_unused]] const std::string said = ::testing::internal::GetCapturedStderr();
#ifdef ZEROD_WITH_CUDNN
      if (t == DType::kBF16) EXPECT_EQ(said.find("runs unfused"), std::string::npos) << said;
#endif
      EXPECT_EQ(bits(again.out), bits(r.out));
      EXPECT_EQ(bits(again.dqkv), bits(r.dqkv));
      const float rel = t == DType::kF32 ? 1e-5f : 1e-2f;
      expect_close(r.out, r.cpu_out, rel, "packed attention out");
      expect_close(r.dqkv, r.cpu_dqkv, rel, "packed attention dqkv");
    }
  }
}

// Packed sequences' learned positions, forward and backward, and their
// rotary turns, bit for bit the CPU's.
TEST_F(CudaTable, PackedPositionsEmbedAndTurnAsTheCpu) {
  const int B = 3, T = 40, V = 23, C = 64;
  const int64_t N = int64_t(B) * T;
  const std::vector<int32_t> pos = testing::packed_positions(B, T, {1, 7, 13, 40});
  std::vector<int32_t> tokens(N), order(N), pos_order(N);
  std::mt19937 rng(6);
  for (auto& x : tokens) x = static_cast<int32_t>(rng() % V);
  token_order(tokens.data(), N, order.data());
  token_order(pos.data(), N, pos_order.data());
  const int32_t *g_tokens = up(tokens), *g_order = up(order), *g_pos = up(pos), *g_pos_order = up(pos_order);
  for (DType t : kOperandTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto k = table(t);
    auto wte = randn(int64_t(V) * C, 25), wpe = randn(int64_t(T) * C, 26), dout = randn(N * C, 27);
    std::vector<float> out(N * C);
    auto dwte = randn(int64_t(V) * C, 28), dwpe = randn(int64_t(T) * C, 29);
    void* g_out = up_as(t, out);
    float *g_dwte = up(dwte), *g_dwpe = up(dwpe);
    k->embedding_forward(s(), g_out, g_tokens, up_as(t, wte), up_as(t, wpe), B, T, C, g_pos);
    k->embedding_backward(s(), g_dwte, g_dwpe, up_as(t, dout), g_tokens, g_order, B, T, C, g_pos, g_pos_order);
    const std::vector<float> w = rounded(t, wte), p = rounded(t, wpe), dy = rounded(t, dout);
    cpu::embedding_forward(out.data(), tokens.data(), w.data(), p.data(), B, T, C, pos.data());
    cpu::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C, pos.data());
    EXPECT_EQ(bits(down_as(t, g_out, out.size())), bits(rounded(t, out)));
    EXPECT_EQ(bits(down(g_dwte, dwte.size())), bits(dwte));
    EXPECT_EQ(bits(down(g_dwpe, dwpe.size())), bits(dwpe));

    // Rotary positions of 4 heads over 2, hd 16 (16 bytes a thread),
    // forward and back.
    GptConfig c = *gpt_preset("llama-tiny");
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 64;
    RopeShape shape{T, 4, 2, 16};
    const std::vector<float> table = rope_table(c, T);
    const float* g_table = up(table);
    auto qkv = rounded(t, randn(N * shape.width(), 36)), dqkv = rounded(t, randn(N * shape.width(), 37));
    void *g_qkv = up_as(t, qkv), *g_dqkv = up_as(t, dqkv);
    shape.pos = g_pos;
    k->rope_forward(s(), g_qkv, g_table, shape, N);
    k->rope_backward(s(), g_dqkv, g_table, shape, N);
    shape.pos = pos.data();
    cpu::rope_forward(qkv.data(), table.data(), shape, N);
    cpu::rope_backward(dqkv.data(), table.data(), shape, N);
    EXPECT_EQ(bits(down_as(t, g_qkv, qkv.size())), bits(rounded(t, qkv)));
    EXPECT_EQ(bits(down_as(t, g_dqkv, dqkv.size())), bits(rounded(t, dqkv)));
  }
}

// V = 500: each row in shared memory; V = 30000: the bf16 row there too,
// several batches of four vectors a lane, and the fp32 row (117 KB of
// vectors) in the registers of one block an SM; Llama 3's 128,256 and
// Qwen2's 151,936 in bf16 (250 and 297 KB) in 128 KB of registers and
// the rest in shared memory on an H100 or H200 (on an A100 the second is
// read twice); Llama 3's in fp32 (501 KB) read twice from global memory. Every fifth target is -1 (left
// out by a loss mask): no loss, no gradient.
TEST_F(CudaTable, TheHeadsLossAndGradientsInChunks) {
  const int64_t N = 40;
  const int C = 32;
  for (const auto& [t, V] : {std::pair{DType::kF32, 500}, std::pair{DType::kBF16, 500}, std::pair{DType::kF32, 30000},
                             std::pair{DType::kBF16, 30000}, std::pair{DType::kBF16, 128256},
                             std::pair{DType::kBF16, 151936}, std::pair{DType::kF32, 128256}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", V " << V);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = i % 5 == 3 ? -1 : static_cast<int32_t>((i * 37) % V);
    const int32_t* g_targets = up(targets);
    auto k = table(t);
    auto inp = randn(N * C, 40), wte = randn(int64_t(V) * C, 41, 0.2f);
    const int64_t chunk = 16, ld = k->memory().logits_stride(V);
    std::vector<double> losses(N, std::nan(""));  // every row's is written
    std::vector<float> logits(chunk * ld), dinp(N * C);
    auto dwte = randn(int64_t(V) * C, 42);
    double* g_losses = up(losses);
    void* g_dinp = up_as(t, dinp);
    float* g_dwte = up(dwte);
    const void *g_inp = up_as(t, inp), *g_wte = up_as(t, wte);
    ClassifierArgs g{g_inp, g_wte, g_targets, N, C, V, 0.125f, t, up_as(t, logits), chunk, g_losses, g_dinp, g_dwte};
    ClassifierArgs c{inp.data(),    wte.data(), targets.data(), N,           C,          V, 0.125f, t,
                     logits.data(), chunk,      losses.data(),  dinp.data(), dwte.data()};
    k->classifier_forward_backward(s(), g);
    cpu::classifier_forward_backward(c);
    const std::vector<double> got = down(g_losses, N);
    const double loss_rel = t == DType::kF32 ? 1e-5 : 2e-3;
    for (int64_t i = 0; i < N; ++i) ASSERT_NEAR(got[i], losses[i], loss_rel * std::fabs(losses[i])) << i;
    const float grad_rel = t == DType::kF32 ? 1e-5f : 1e-2f;
    expect_close(down_as(t, g_dinp, dinp.size()), dinp, grad_rel, "dinp");
    expect_close(down(g_dwte, dwte.size()), dwte, grad_rel, "dwte");

    // The logits a caller reads: fp32, rows V apart, from the operands.
    std::vector<float> want(N * V);
    float* g_logits = up(want);
    k->classifier_logits(s(), g_logits, g_inp, C, g_wte, N, C, V);
    cpu::classifier_logits(want.data(), inp.data(), C, wte.data(), N, C, V);
    expect_close(down(g_logits, want.size()), want, 1e-5f, "logits");
  }
}

TEST_F(CudaTable, CastsAndSumsAreTheCpusBitForBit) {
  auto x = randn(10000, 50, 300.0f);
  x.push_back(70000.0f);
  x.push_back(1e-8f);
  const int64_t n = static_cast<int64_t>(x.size());
  const float* g_x = up(x);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint16_t> packed(n * 2);
    void* g_packed = up(packed);
    std::vector<float> back(n);
    float* g_back = up(back);
    k_->convert_from_f32(s(), t, g_x, g_packed, n);
    k_->convert_to_f32(s(), t, g_packed, g_back, n);
    std::vector<float> want = x;
    round_to(t, want.data(), n);
    EXPECT_EQ(bits(down(g_back, n)), bits(want));
    float* g_r = up(x);
    k_->round_to(s(), t, g_r, n);
    EXPECT_EQ(bits(down(g_r, n)), bits(want));
  }
  std::vector<double> d(777);
  for (size_t i = 0; i < d.size(); ++i) d[i] = std::sin(double(i)) * 1e3;
  std::vector<double> out(2);
  double* g_out = up(out);
  k_->sum(s(), up(d), int64_t(d.size()), g_out);
  const std::vector<double> got = down(g_out, 2);
  EXPECT_EQ(got[0], cpu::sum_in_lanes(d.data(), int64_t(d.size())));
  EXPECT_EQ(got[1], 0.0) << "one double written";
  EXPECT_NEAR(got[0], cpu::sum(d.data(), int64_t(d.size())), 1e-9);
  // Sums of squares: no chunk, part of one, several, and over 256 chunks
  // (the partials' lanes wrap).
  for (int64_t m : {0, 1, 257, 65537, 3 * 65536 + 5, 257 * 65536 + 4097}) {
    SCOPED_TRACE(m);
    const auto big = randn(m, 51 + m);
    std::vector<double> sum(1, -1.0);
    double* g_sum = up(sum);
    k_->sum_squares(s(), up(big), m, g_sum);
    EXPECT_EQ(down(g_sum, 1)[0], cpu::sum_squares(big.data(), m));
  }
  // Many at once, as a rank's gradients unit by unit: more than a group,
  // empty ones among them, one of several chunks; each the CPU's sum of it
  // alone, bit for bit, two launches a group.
  const int count = cuda::kSquaresGroup + 7;
  std::vector<std::vector<float>> xs(count);
  std::vector<double> sums(count, -1.0);
  double* g_sums = up(sums);
  std::vector<SquaresOf> ts;
  for (int i = 0; i < count; ++i) {
    const int64_t m = i == 3 ? 2 * cpu::kSquaresChunk + 5 : i % 10 == 9 ? 0 : 37 * i + 1;
    xs[i] = randn(m, 90 + i);
    ts.push_back({up(xs[i]), m, g_sums + i});
  }
  const int64_t before = k_->launches();
  k_->sum_squares_tensors(s(), ts);
  EXPECT_EQ(k_->launches() - before, 4) << "two groups, two launches each";
  const std::vector<double> each = down(g_sums, count);
  for (int i = 0; i < count; ++i) EXPECT_EQ(each[i], cpu::sum_squares(xs[i].data(), ts[i].n)) << i;
}

TEST_F(CudaTable, ScalingAndDropoutAreTheCpusBitForBit) {
  for (DType t : kOperandTypes) {
    SCOPED_TRACE(dtype_name(t));
    auto k = table(t);
    auto x = randn(100003, 52, 30.0f);
    const int64_t n = static_cast<int64_t>(x.size());
    void* g_scaled = up_as(t, x);
    std::vector<float> scaled = x;
    k->scale(s(), g_scaled, 0.37f, n);
    cpu::scale(scaled.data(), 0.37f, n);
    EXPECT_EQ(bits(down_as(t, g_scaled, n)), bits(rounded(t, scaled)));

    std::vector<float> dropped(n);
    void* g_x = up_as(t, x);
    void* g_y = up_as(t, dropped);
    k->dropout(s(), g_y, g_x, n, 0.1f, 12345);
    k->dropout(s(), g_x, g_x, n, 0.1f, 12345);  // in place
    cpu::dropout(dropped.data(), x.data(), n, 0.1f, 12345);
    EXPECT_EQ(bits(down_as(t, g_y, n)), bits(rounded(t, dropped)));
    EXPECT_EQ(bits(down_as(t, g_x, n)), bits(rounded(t, dropped)));

    // Masked as it is summed: the sum in fp32 rounded once.
    auto acc = randn(n, 53, 30.0f);
    void* g_acc = up_as(t, acc);
    g_x = up_as(t, x);
    k->dropout_add(s(), g_acc, g_x, n, 0.1f, 12345);
    cpu::dropout_add(acc.data(), x.data(), n, 0.1f, 12345);
    EXPECT_EQ(bits(down_as(t, g_acc, n)), bits(rounded(t, acc)));
  }
}

TEST_F(CudaTable, AdamAndEightBitAdamAreTheCpuUpdatesBitForBit) {
  const int64_t n = 3 * kQuantBlock + 41;
  const AdamStep step = make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 3e-3f, 5, 0.5f, true);
  for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(gt));
    const auto g32 = randn(n, 60, 0.1f);
    std::vector<uint16_t> g16(n);
    convert_from_f32(gt == DType::kF32 ? DType::kBF16 : gt, g32.data(), g16.data(), n);
    const void* grad = gt == DType::kF32 ? static_cast<const void*>(g32.data()) : g16.data();
    const void* g_grad = gt == DType::kF32 ? static_cast<const void*>(up(g32)) : up(g16);
    auto p = randn(n, 61), m = randn(n, 62, 0.01f), v = randn(n, 63, 0.01f);
    for (float& e : v) e = e * e;
    std::vector<uint16_t> p16(n);
    float *g_p = up(p), *g_m = up(m), *g_v = up(v);
    uint16_t* g_p16 = up(p16);
    k_->adam(s(), AdamTensor{g_p, g_m, g_v, g_grad, gt, g_p16, DType::kBF16, n}, step);
    adam_update(AdamTensor{p.data(), m.data(), v.data(), grad, gt, p16.data(), DType::kBF16, n}, step);
    EXPECT_EQ(bits(down(g_p, n)), bits(p));
    EXPECT_EQ(bits(down(g_m, n)), bits(m));
    EXPECT_EQ(bits(down(g_v, n)), bits(v));
    EXPECT_EQ(down(g_p16, n), p16);

    // 8-bit states from zero over three steps.
    const int64_t blocks = quant_blocks(n);
    auto q = randn(n, 64);
    std::vector<uint8_t> qm(n), qv(n);
    std::vector<float> am(blocks), av(blocks);
    Adam8bitTensor c{q.data(), qm.data(), qv.data(), am.data(), av.data(), grad, gt, nullptr, DType::kBF16, n};
    adam8bit_zero_states(c);
    Adam8bitTensor g{up(q), up(qm), up(qv), up(am), up(av), g_grad, gt, nullptr, DType::kBF16, n};
    for (int k = 1; k <= 3; ++k) {
      const AdamStep sk = make_adam_step(AdamHyper{}, 1e-3f, k, 1.0f, true);
      k_->adam8bit(s(), g, sk);
      adam8bit_update(c, sk);
    }
    EXPECT_EQ(bits(down(g.param, n)), bits(q));
    EXPECT_EQ(down(g.m, n), qm);
    EXPECT_EQ(down(g.v, n), qv);
    EXPECT_EQ(bits(down(g.m_absmax, blocks)), bits(am));
    EXPECT_EQ(bits(down(g.v_absmax, blocks)), bits(av));
  }
}

// A rank's tensors in launches of kGroupTensors (ops/optim_groups.h): 30
// tensors of various sizes and steps, with an empty one among them, each
// updated as the CPU updates it, fp32 states and 8-bit.
TEST_F(CudaTable, AdamOverManyTensorsInFewLaunchesIsEachCpuUpdate) {
  const int count = 31;
  std::vector<std::vector<float>> p(count), m(count), v(count), g(count), q(count), am(count), av(count);
  std::vector<std::vector<uint8_t>> qm(count), qv(count);
  std::vector<AdamTensor> cpu_t, gpu_t;
  std::vector<Adam8bitTensor> cpu_q, gpu_q;
  std::vector<AdamStep> steps;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 7 ? 0 : 97 * i + 13, blocks = quant_blocks(n);
    p[i] = randn(n, 70 + i);
    m[i] = randn(n, 170 + i, 0.01f);
    v[i] = randn(n, 270 + i, 0.01f);
    for (float& e : v[i]) e = e * e;
    g[i] = randn(n, 370 + i, 0.1f);
    q[i] = randn(n, 470 + i);
    qm[i].resize(n);
    qv[i].resize(n);
    am[i].resize(blocks);
    av[i].resize(blocks);
    steps.push_back(make_adam_step(AdamHyper{}, 1e-3f * (1 + i % 3), 1, 1.0f, i % 2 == 0));
    cpu_t.push_back({p[i].data(), m[i].data(), v[i].data(), g[i].data(), DType::kF32, nullptr, DType::kBF16, n});
    gpu_t.push_back({up(p[i]), up(m[i]), up(v[i]), up(g[i]), DType::kF32, nullptr, DType::kBF16, n});
    cpu_q.push_back({q[i].data(), qm[i].data(), qv[i].data(), am[i].data(), av[i].data(), g[i].data(), DType::kF32,
                     nullptr, DType::kBF16, n});
    adam8bit_zero_states(cpu_q.back());
    gpu_q.push_back({up(q[i]), up(qm[i]), up(qv[i]), up(am[i]), up(av[i]), gpu_t.back().grad, DType::kF32, nullptr,
                     DType::kBF16, n});
  }
  const int64_t before = k_->launches();
  k_->adam_tensors(s(), gpu_t, steps);
  k_->adam8bit_tensors(s(), gpu_q, steps);
  EXPECT_EQ(k_->launches() - before, 4) << "30 tensors, 24 a launch, twice";
  for (int i = 0; i < count; ++i) {
    adam_update(cpu_t[i], steps[i]);
    adam8bit_update(cpu_q[i], steps[i]);
    const int64_t n = cpu_t[i].n, blocks = quant_blocks(n);
    EXPECT_EQ(bits(down(gpu_t[i].param, n)), bits(p[i])) << i;
    EXPECT_EQ(bits(down(gpu_t[i].m, n)), bits(m[i])) << i;
    EXPECT_EQ(bits(down(gpu_t[i].v, n)), bits(v[i])) << i;
    EXPECT_EQ(bits(down(gpu_q[i].param, n)), bits(q[i])) << i;
    EXPECT_EQ(down(gpu_q[i].m, n), qm[i]) << i;
    EXPECT_EQ(down(gpu_q[i].v, n), qv[i]) << i;
    EXPECT_EQ(bits(down(gpu_q[i].m_absmax, blocks)), bits(am[i])) << i;
    EXPECT_EQ(bits(down(gpu_q[i].v_absmax, blocks)), bits(av[i])) << i;
  }
}

// The update factor from units' sums on the device, and updates that read
// it there: the CPU's factor and updates bit for bit; a sum that
// overflowed gives NaN, and updates reading it change nothing.
TEST_F(CudaTable, TheUpdateFactorAndUpdatesReadingItAreTheCpus) {
  const int64_t n = 2 * kQuantBlock + 9;
  for (const std::vector<double>& sums : {std::vector<double>{0.5, 3e3, 7.25}, std::vector<double>{1.0, INFINITY}}) {
    float factor = 0;
    double sumsq = 0;
    update_factor_of_sums(sums.data(), static_cast<int>(sums.size()), 1024.0, 1.0, &factor, &sumsq);
    const std::vector<float> unset_factor = {-1.0f};
    const std::vector<double> unset_sumsq = {-1.0};
    double* g_sums = up(sums);
    float* g_factor = up(unset_factor);
    double* g_sumsq = up(unset_sumsq);
    k_->update_factor(s(), g_sums, static_cast<int>(sums.size()), 1024.0, 1.0, g_factor, g_sumsq);
    if (std::isfinite(sumsq)) {
      EXPECT_EQ(bits(down(g_factor, 1)), bits(std::vector<float>{factor}));
      EXPECT_EQ(down(g_sumsq, 1)[0], sumsq);
    } else {  // a NaN's bits are the processor's own
      EXPECT_TRUE(std::isnan(down(g_factor, 1)[0]));
      EXPECT_FALSE(std::isfinite(down(g_sumsq, 1)[0]));
    }

    AdamStep given = make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 1e-3f, 2, factor, true);
    AdamStep read = given;
    read.grad_scale = 1.0f;
    read.grad_scale_at = g_factor;
    const auto g = randn(n, 80, 0.1f);
    auto p = randn(n, 81), m = randn(n, 82, 0.01f), v = randn(n, 83, 0.01f), q = randn(n, 84);
    for (float& e : v) e = e * e;
    std::vector<uint8_t> qm(n), qv(n);
    std::vector<float> am(quant_blocks(n)), av(quant_blocks(n));
    Adam8bitTensor c{q.data(), qm.data(),   qv.data(), am.data(),    av.data(),
                     g.data(), DType::kF32, nullptr,   DType::kBF16, n};
    adam8bit_zero_states(c);
    Adam8bitTensor dq{up(q), up(qm), up(qv), up(am), up(av), up(g), DType::kF32, nullptr, DType::kBF16, n};
    AdamTensor dt{up(p), up(m), up(v), dq.grad, DType::kF32, nullptr, DType::kBF16, n};
    k_->adam_tensors(s(), {&dt, 1}, {&read, 1});
    k_->adam8bit_tensors(s(), {&dq, 1}, {&read, 1});
    if (std::isfinite(factor)) {
      adam_update(AdamTensor{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr, DType::kBF16, n}, given);
      adam8bit_update(c, given);
    }
    EXPECT_EQ(bits(down(dt.param, n)), bits(p));
    EXPECT_EQ(bits(down(dt.m, n)), bits(m));
    EXPECT_EQ(bits(down(dt.v, n)), bits(v));
    EXPECT_EQ(bits(down(dq.param, n)), bits(q));
    EXPECT_EQ(down(dq.m, n), qm);
    EXPECT_EQ(down(dq.v, n), qv);
  }
}

// NF4 dequantization: the CPU's weights, bit for bit.
// Into a product's operands, fp32 and bf16: runs of 16 weights (cols a
// multiple of 16, over many groups of absmax values) and weight by weight
// (cols not), with room past the rows that stays as it was.
TEST_F(CudaTable, Nf4DequantizationIsTheCpusTransposeBitForBit) {
  for (const DType t : kOperandTypes) {
    auto k = table(t);
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1000, 832}, {33, 101}}) {
      const int64_t n = rows * cols, ld = rows + 3;
      const Nf4Sizes z = nf4_sizes(n);
      const auto x = randn(n, 91, 0.05f);
      std::vector<uint8_t> codes(z.code_bytes), absmax_codes(z.blocks);
      std::vector<float> group_absmax(z.groups), offset(1), map(kNf4MapValues), want(cols * ld, -3.0f);
      const Nf4Tensor c{codes.data(), absmax_codes.data(), group_absmax.data(), offset.data(), map.data(), n};
      nf4_quantize(x.data(), c);
      nf4_dequantize_transposed(c, rows, cols, ld, want.data());
      const Nf4Tensor g{up(codes), up(absmax_codes), up(group_absmax), up(offset), up(map), n};
      std::vector<float> out(cols * ld, -3.0f);
      void* g_out = up_as(t, out);  // -3 is exact in bf16
      k->nf4_dequantize(s(), g, {rows, cols, ld}, g_out);
      std::vector<float> rounded = want;
      round_to(t, rounded.data(), rounded.size());
      EXPECT_EQ(bits(down_as(t, g_out, out.size())), bits(rounded)) << dtype_name(t) << " " << rows << " x " << cols;
    }
  }
}

}  // namespace
}  // namespace zerod
