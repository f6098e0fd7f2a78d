// The CUDA kernels' bodies (runtime/kernels/ops/*.h) run here on the
// CPU, over the grid each kernel launches them on, against the CPU kernels:
// their indexing and arithmetic are checked without a GPU. The GPU runs the
// same bodies (tests/test_cuda_kernels.cc checks them there).
//
// Tolerances: the optimizer bodies are exact (this file and the CPU's
// optimizer kernels are built without fused multiply-adds, and the bodies
// follow adam.h's operations one by one). GELU repeats the CPU's
// arithmetic, but -march=native may let the compiler fuse a multiply-add
// in one and not the other, so it is held to 4 ulps of fp32 relative to
// the largest value. Sums the GPU splits
// among threads (column chunks, a row's lanes) add in another order: 1e-6
// of the largest value, about 8 ulps, for the sizes here. Attention
// computes differently (recomputed probabilities): held to 2e-6 relative
// to the largest value, about 16 fp32 ulps, for T = 32.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/kernels.h"
#include "runtime/kernels/ops/adam.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/attention.h"
#include "runtime/kernels/ops/attention_plan.h"
#include "runtime/kernels/ops/classifier.h"
#include "runtime/kernels/ops/embedding.h"
#include "runtime/kernels/ops/layernorm.h"
#include "runtime/kernels/ops/matmul.h"
#include "runtime/kernels/ops/nf4.h"
#include "runtime/kernels/ops/optim_groups.h"
#include "runtime/kernels/ops/pointwise.h"
#include "runtime/kernels/ops/rmsnorm.h"
#include "runtime/kernels/ops/rope.h"
#include "runtime/kernels/ops/rows.h"
#include "runtime/kernels/ops/sum_squares.h"
#include "runtime/kernels/ops/swiglu.h"
#include "runtime/model/gpt.h"
#include "runtime/model/rope.h"
#include "tests/float_compare.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::bits;
using testing::expect_close;
using testing::randn;
using testing::row_tol;

// The launch grid: f(i) for every thread index i in [0, n).
template <class F>
void for_each_index(int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) f(i);
}

// A row on `lanes` lanes, as a warp or block runs it: each lane's partial
// partial(lane), combined in lane order.
template <class F, class Op>
auto lanes_reduce(int lanes, F partial, Op op) {
  auto v = partial(0);
  for (int lane = 1; lane < lanes; ++lane) v = op(v, partial(lane));
  return v;
}
// A block of kSquaresLanes lanes summing as reduce.cuh's block_tree_reduce
// does: each tree level over the lanes below its stride.
template <class F>
double block_tree_sum(F partial) {
  std::vector<double> lanes(cpu::kSquaresLanes);
  for (int l = 0; l < cpu::kSquaresLanes; ++l) lanes[l] = partial(l);
  for (int stride = cpu::kSquaresLanes / 2; stride > 0; stride /= 2) {
    for (int l = 0; l < stride; ++l) lanes[l] = lanes[l] + lanes[l + stride];
  }
  return lanes[0];
}
const auto kMax = [](auto a, auto b) { return a > b ? a : b; };
const auto kSum = [](auto a, auto b) { return a + b; };

// Stage 2's total of column o, a warp's lanes' shares combined.
float column_total(int64_t o, const float* partial, int64_t chunks, int64_t stride) {
  return lanes_reduce(
      32, [&](int l) { return cuda::column_share(o, l, 32, partial, chunks, stride); }, kSum);
}
// A column sum of N rows over `cols` partials, as the GPU runs it: stage 1
// for every chunk and column, then the totals.
template <class Partial, class Total>
void column_sum(int64_t N, int64_t cols, int64_t columns, Partial partial, Total total) {
  const int64_t rows = cuda::column_chunk_rows(N, cols), chunks = (N + rows - 1) / rows;
  for_each_index(chunks * columns, [&](int64_t j) { partial(j, rows); });
  for_each_index(columns, [&](int64_t o) { total(o, chunks); });
}

constexpr float kUlps4 = 4 * 0x1p-23f;

// Bytes starting 16-byte aligned, as device allocations do.
class Bytes16Buffer {
 public:
  explicit Bytes16Buffer(int64_t bytes) : v_((bytes + 15) / 16) {}
  char* data() { return reinterpret_cast<char*>(v_.data()); }

 private:
  std::vector<cuda::Bytes16> v_;
};

// n operands of type t at p, as fp32 values.
std::vector<float> operand_values(DType t, const void* p, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = cuda::load_f32(p, t, i);
  return v;
}

// Operands of type kT stored from fp32 values, each in an aligned buffer
// of its own that this keeps.
template <DType kT>
class AlignedOperands {
 public:
  void* operator()(const std::vector<float>& v) {
    bufs_.emplace_back(static_cast<int64_t>(v.size()) * dtype_size(kT));
    for (size_t i = 0; i < v.size(); ++i) cuda::store_f32(bufs_.back().data(), kT, i, v[i]);
    return bufs_.back().data();
  }

 private:
  std::vector<Bytes16Buffer> bufs_;
};

TEST(CudaBodies, GeluAndItsGradientAreTheCpuKernels) {
  const int64_t n = 5000;
  const auto x = randn(n, 1, 3.0f), dout = randn(n, 2);
  std::vector<float> want(n), got(n), dwant(n), dgot(n);
  cpu::gelu_forward(want.data(), x.data(), n);
  cpu::gelu_backward(dwant.data(), x.data(), dout.data(), n);
  for_each_index(n, [&](int64_t i) { got[i] = cuda::gelu(x[i]); });
  for_each_index(n, [&](int64_t i) { dgot[i] = cuda::gelu_grad(x[i], dout[i]); });
  expect_close(got, want, kUlps4, "gelu");
  expect_close(dgot, dwant, kUlps4, "gelu_grad");
}

// The maps 16 bytes a thread, and the tail one element a thread: the
// one-element path's bits, for fp32 and bf16 operands; with a pointer off
// 16 bytes, every thread takes one element.
template <DType kT>
void expect_maps_are_elementwise(bool aligned) {
  SCOPED_TRACE(::testing::Message() << dtype_name(kT) << (aligned ? "" : ", unaligned"));
  const int64_t n = 1003;  // not a whole number of vectors
  const int64_t ob = dtype_size(kT);
  auto x = randn(n, 7, 3.0f), y = randn(n, 8);
  // Each array one element in where unaligned.
  const int64_t lead = aligned ? 0 : 1;
  std::vector<Bytes16Buffer> bufs;
  auto operands = [&](const std::vector<float>& v) {
    bufs.emplace_back((n + lead) * ob);
    char* p = bufs.back().data() + lead * ob;
    for (int64_t i = 0; i < n; ++i) cuda::store_f32(p, kT, i, v[i]);
    return static_cast<void*>(p);
  };
  void *a = operands(x), *b = operands(y), *out = operands(std::vector<float>(n));
  const int64_t vectors = cuda::vectors_for<kT>(n, out, a, b);
  EXPECT_EQ(vectors, aligned ? n / cuda::Lanes16<kT>::kWidth : 0);
  for_each_index(cuda::map_threads<kT>(n, vectors),
                 [&](int64_t t) { cuda::map_at<kT>(t, vectors, out, a, b, cuda::GeluGradOf{}); });
  for (int64_t i = 0; i < n; ++i) {
    const float want = cuda::gelu_grad(cuda::load_f32(a, kT, i), cuda::load_f32(b, kT, i));
    ASSERT_EQ(bits({cuda::load_f32(out, kT, i)}), bits({cuda::round_f32(kT, want)})) << i;
  }
  for_each_index(cuda::map_threads<kT>(n, vectors),
                 [&](int64_t t) { cuda::map_at<kT>(t, vectors, out, a, nullptr, cuda::GeluOf{}); });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits({cuda::load_f32(out, kT, i)}), bits({cuda::round_f32(kT, cuda::gelu(cuda::load_f32(a, kT, i)))}))
        << i;
  }
}

TEST(CudaBodies, MapsSixteenBytesAThreadAreElementwise) {
  for (bool aligned : {true, false}) {
    expect_maps_are_elementwise<DType::kF32>(aligned);
    expect_maps_are_elementwise<DType::kBF16>(aligned);
    expect_maps_are_elementwise<DType::kF16>(aligned);
  }
}

TEST(CudaBodies, LayerNormRowsAndColumnsAreTheCpuKernels) {
  const int64_t N = 150;  // ten chunks of rows for the parameters, the last one partial
  const int C = 72;
  const auto x = randn(N * C, 3, 2.0f), w = randn(C, 4), b = randn(C, 5), dout = randn(N * C, 6);
  std::vector<float> out(N * C), mean(N), rstd(N), gout(N * C), gmean(N), grstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  // Each row on 32 lanes, as the GPU's warp runs it.
  const int lanes = 32;
  for_each_index(N, [&](int64_t n) {
    const float* xr = x.data() + n * C;
    gmean[n] = lanes_reduce(
                   lanes, [&](int l) { return cuda::row_sum(xr, C, l, lanes); }, kSum) /
               C;
    grstd[n] = cuda::layernorm_rstd(
        lanes_reduce(
            lanes, [&](int l) { return cuda::row_squares_about(xr, C, gmean[n], l, lanes); }, kSum),
        C);
    for (int l = 0; l < lanes; ++l) {
      cuda::layernorm_write(gout.data() + n * C, xr, w.data(), b.data(), C, gmean[n], grstd[n], l, lanes);
    }
  });
  expect_close(gout, out, 1e-6f, "layernorm out");
  expect_close(gmean, mean, 1e-6f, "layernorm mean");
  expect_close(grstd, rstd, 1e-6f, "layernorm rstd");

  // Gradients accumulate: start from the same non-zero values.
  auto dinp = randn(N * C, 7), dw = randn(C, 8), db = randn(C, 9);
  auto gdinp = dinp, gdw = dw, gdb = db;
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  for_each_index(N, [&](int64_t n) {
    const float *xr = x.data() + n * C, *dy = dout.data() + n * C;
    const cuda::LayerNormRowSums sums = lanes_reduce(
        lanes, [&](int l) { return cuda::layernorm_backward_sums(dy, xr, w.data(), mean[n], rstd[n], C, l, lanes); },
        [](cuda::LayerNormRowSums a, cuda::LayerNormRowSums b) {
          return cuda::LayerNormRowSums{a.dnorm + b.dnorm, a.dnorm_norm + b.dnorm_norm};
        });
    for (int l = 0; l < lanes; ++l) {
      cuda::layernorm_backward_write(gdinp.data() + n * C, dy, xr, w.data(), mean[n], rstd[n], sums, C, l, lanes);
    }
  });
  std::vector<float> partial(cuda::kColumnPartials);
  column_sum(
      N, 2 * C, C,
      [&](int64_t j, int64_t rows) {
        cuda::layernorm_params_partial_at(j, partial.data(), dout.data(), x.data(), mean.data(), rstd.data(), N, C,
                                          rows);
      },
      [&](int64_t i, int64_t chunks) {
        gdw[i] += column_total(i, partial.data(), chunks, 2 * C);
        gdb[i] += column_total(i, partial.data() + C, chunks, 2 * C);
      });
  expect_close(gdinp, dinp, 1e-6f, "layernorm dinp");
  expect_close(gdw, dw, 1e-6f, "layernorm dw");
  expect_close(gdb, db, 1e-6f, "layernorm db");
}

// The Llama family's bodies as the CUDA table launches them: RMSNorm a
// row on 32 lanes and its weight's gradient in column chunks (sums in
// another order: 1e-6 of the largest value); SwiGLU and the rotary input
// a thread an element, on bf16 operands: the CPU's values of the same
// rounded inputs, rounded once, bit for bit.
TEST(CudaBodies, LlamaRowsAndElementsAreTheCpuKernels) {
  const int64_t N = 150;
  const int C = 72, lanes = 32;
  const float eps = 1e-6f;
  const auto x = randn(N * C, 40, 2.0f), w = randn(C, 41), dout = randn(N * C, 42);
  std::vector<float> out(N * C), rstd(N), gout(N * C), grstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for_each_index(N, [&](int64_t n) {
    const float* xr = x.data() + n * C;
    grstd[n] =
        cuda::rmsnorm_rstd(lanes_reduce(
                               lanes, [&](int l) { return cuda::row_squares_about(xr, C, 0.0f, l, lanes); }, kSum),
                           C, eps);
    for (int l = 0; l < lanes; ++l) cuda::rmsnorm_write(gout.data() + n * C, xr, w.data(), C, grstd[n], l, lanes);
  });
  expect_close(gout, out, 1e-6f, "rmsnorm out");
  expect_close(grstd, rstd, 1e-6f, "rmsnorm rstd");
  auto dinp = randn(N * C, 43), dw = randn(C, 44);
  auto gdinp = dinp, gdw = dw;
  cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for_each_index(N, [&](int64_t n) {
    const float *xr = x.data() + n * C, *dy = dout.data() + n * C;
    const float sum = lanes_reduce(
        lanes, [&](int l) { return cuda::rmsnorm_backward_sum(dy, xr, w.data(), rstd[n], C, l, lanes); }, kSum);
    for (int l = 0; l < lanes; ++l) {
      cuda::rmsnorm_backward_write(gdinp.data() + n * C, dy, xr, w.data(), rstd[n], sum, C, l, lanes);
    }
  });
  std::vector<float> partial(cuda::kColumnPartials);
  column_sum(
      N, C, C,
      [&](int64_t j, int64_t rows) {
        cuda::rmsnorm_weight_partial_at(j, partial.data(), dout.data(), x.data(), rstd.data(), N, C, rows);
      },
      [&](int64_t i, int64_t chunks) { gdw[i] += column_total(i, partial.data(), chunks, C); });
  expect_close(gdinp, dinp, 1e-6f, "rmsnorm dinp");
  expect_close(gdw, dw, 1e-6f, "rmsnorm dw");

  // bf16 operands, as the GPU's: an op's inputs rounded, its outputs too.
  const DType t = DType::kBF16;
  const auto to_operands = [&](std::vector<float> v) {
    round_to(t, v.data(), v.size());
    std::vector<uint16_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) cuda::store_f32(o.data(), t, i, v[i]);
    return std::pair{v, o};
  };
  const auto rounded = [&](std::vector<float> v) {
    round_to(t, v.data(), v.size());
    return v;
  };
  const int F = 20;
  const auto [gu, gu16] = to_operands(randn(N * 2 * F, 45, 2.0f));
  const auto [dy, dy16] = to_operands(randn(N * F, 46));
  std::vector<float> sw(N * F), dsw(N * 2 * F);
  cpu::swiglu_forward(sw.data(), gu.data(), N, F);
  cpu::swiglu_backward(dsw.data(), gu.data(), dy.data(), N, F);
  std::vector<uint16_t> gsw(N * F), gdsw(N * 2 * F);
  const cuda::ConstOperands gu_in{gu16.data(), t}, dy_in{dy16.data(), t};
  for_each_index(N * F, [&](int64_t j) { cuda::swiglu_at(j, cuda::Operands{gsw.data(), t}, gu_in, F); });
  for_each_index(N * F, [&](int64_t j) {
    cuda::swiglu_backward_at(j, cuda::Operands{gdsw.data(), t}, gu_in, dy_in, F);
  });
  EXPECT_EQ(bits(operand_values(t, gsw.data(), N * F)), bits(rounded(sw)));
  EXPECT_EQ(bits(operand_values(t, gdsw.data(), N * 2 * F)), bits(rounded(dsw)));
  // 16 bytes a thread where F is a whole number of vectors (24 bf16: three
  // a row; none at 20), the CPU's bits.
  EXPECT_EQ(cuda::swiglu_vectors<DType::kBF16>(N, F, gsw.data(), gu16.data(), nullptr), 0);
  {
    const int Fv = 24;
    const auto [vgu, vgu16] = to_operands(randn(N * 2 * Fv, 52, 2.0f));
    const auto [vdy, vdy16] = to_operands(randn(N * Fv, 53));
    std::vector<float> y(N * Fv), dgu(N * 2 * Fv);
    cpu::swiglu_forward(y.data(), vgu.data(), N, Fv);
    cpu::swiglu_backward(dgu.data(), vgu.data(), vdy.data(), N, Fv);
    std::vector<uint16_t> gy(N * Fv), gdgu(N * 2 * Fv);
    const int64_t vectors = cuda::swiglu_vectors<DType::kBF16>(N, Fv, gdgu.data(), vgu16.data(), vdy16.data());
    ASSERT_EQ(vectors, N * Fv / 8);
    for_each_index(vectors, [&](int64_t v) { cuda::swiglu_vec_at<DType::kBF16>(v, gy.data(), vgu16.data(), Fv); });
    for_each_index(vectors, [&](int64_t v) {
      cuda::swiglu_backward_vec_at<DType::kBF16>(v, gdgu.data(), vgu16.data(), vdy16.data(), Fv);
    });
    EXPECT_EQ(bits(operand_values(t, gy.data(), N * Fv)), bits(rounded(y)));
    EXPECT_EQ(bits(operand_values(t, gdgu.data(), N * 2 * Fv)), bits(rounded(dgu)));
  }

  const int T = 10, NH = 6, KV = 2, hd = 12;  // N = 15 sequences of 10
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_head = NH;
  c.n_kv_head = KV;
  c.n_embd = NH * hd;
  const std::vector<float> table = rope_table(c, T);
  const cuda::RopeShape rs{T, NH, KV, hd};
  const int64_t W = rs.width();
  const auto [qkv, qkv16] = to_operands(randn(N * W, 47));
  const auto [datt, datt16] = to_operands(randn(N * W, 48));
  std::vector<float> att = qkv, dqkv = datt;
  cpu::rope_forward(att.data(), table.data(), rs, N);
  cpu::rope_backward(dqkv.data(), table.data(), rs, N);
  std::vector<uint16_t> gatt = qkv16, gdqkv = datt16;
  for_each_index(N * rs.pairs(), [&](int64_t j) {
    cuda::rope_pair_at(j, cuda::Operands{gatt.data(), t}, table.data(), rs, 1.0f);
  });
  for_each_index(N * rs.pairs(), [&](int64_t j) {
    cuda::rope_pair_at(j, cuda::Operands{gdqkv.data(), t}, table.data(), rs, -1.0f);
  });
  EXPECT_EQ(bits(operand_values(t, gatt.data(), N * W)), bits(rounded(att)));
  EXPECT_EQ(bits(operand_values(t, gdqkv.data(), N * W)), bits(rounded(dqkv)));
  // 16 bytes of each half a thread where hd/2 is a whole number of them
  // (hd 16 in bf16: one; none at hd 12), the CPU's bits.
  EXPECT_EQ(cuda::rope_vectors<DType::kBF16>(N, rs, gatt.data()), 0);
  {
    c.n_embd = NH * 16;
    const std::vector<float> vtable = rope_table(c, T);
    const cuda::RopeShape vs{T, NH, KV, 16};
    auto [x, x16] = to_operands(randn(N * vs.width(), 54));
    std::vector<float> turned = x, back = x;
    cpu::rope_forward(turned.data(), vtable.data(), vs, N);
    cpu::rope_backward(back.data(), vtable.data(), vs, N);
    std::vector<uint16_t> gturned = x16, gback = x16;
    const int64_t vectors = cuda::rope_vectors<DType::kBF16>(N, vs, gturned.data());
    ASSERT_EQ(vectors, N * vs.pairs() / 8);
    for_each_index(vectors,
                   [&](int64_t v) { cuda::rope_vec_at<DType::kBF16>(v, gturned.data(), vtable.data(), vs, 1.0f); });
    for_each_index(vectors,
                   [&](int64_t v) { cuda::rope_vec_at<DType::kBF16>(v, gback.data(), vtable.data(), vs, -1.0f); });
    EXPECT_EQ(bits(operand_values(t, gturned.data(), N * vs.width())), bits(rounded(turned)));
    EXPECT_EQ(bits(operand_values(t, gback.data(), N * vs.width())), bits(rounded(back)));
    // Packed sequences: documents of 4, 4 and 2 a sequence, each row
    // turned by its position in its document, both paths the CPU's bits.
    std::vector<int32_t> pos(N);
    for (int64_t n = 0; n < N; ++n) pos[n] = static_cast<int32_t>(n % T % 4);
    cuda::RopeShape ps = vs, pairs = rs;
    ps.pos = pairs.pos = pos.data();
    std::vector<float> pturned = x, ppairs = qkv;
    cpu::rope_forward(pturned.data(), vtable.data(), ps, N);
    cpu::rope_forward(ppairs.data(), table.data(), pairs, N);
    std::vector<uint16_t> gpturned = x16, gppairs = qkv16;
    for_each_index(vectors,
                   [&](int64_t v) { cuda::rope_vec_at<DType::kBF16>(v, gpturned.data(), vtable.data(), ps, 1.0f); });
    for_each_index(N * rs.pairs(), [&](int64_t j) {
      cuda::rope_pair_at(j, cuda::Operands{gppairs.data(), t}, table.data(), pairs, 1.0f);
    });
    EXPECT_EQ(bits(operand_values(t, gpturned.data(), N * vs.width())), bits(rounded(pturned)));
    EXPECT_EQ(bits(operand_values(t, gppairs.data(), N * W)), bits(rounded(ppairs)));
    EXPECT_NE(bits(pturned), bits(turned));  // the positions count
  }

  // An adapter's columns of a fused product on bf16 operands: taken as
  // they are, added once rounded.
  const int64_t ld = 3 * rs.C(), c0 = rs.C(), cols = 2 * hd;
  const auto [wide, wide16] = to_operands(randn(N * ld, 50));
  const auto [part, part16] = to_operands(randn(N * cols, 51));
  std::vector<float> taken(N * cols), added = wide;
  cpu::take_columns(taken.data(), wide.data(), ld, c0, N, cols);
  cpu::add_columns(added.data(), ld, c0, part.data(), N, cols);
  std::vector<uint16_t> gtaken(N * cols), gadded = wide16;
  for_each_index(N * cols, [&](int64_t j) {
    cuda::take_column_at(j, cuda::Operands{gtaken.data(), t}, cuda::ConstOperands{wide16.data(), t}, ld, c0, int(cols));
    cuda::add_column_at(j, cuda::Operands{gadded.data(), t}, cuda::ConstOperands{part16.data(), t}, ld, c0, int(cols));
  });
  EXPECT_EQ(bits(operand_values(t, gtaken.data(), N * cols)), bits(taken));
  EXPECT_EQ(bits(operand_values(t, gadded.data(), N * ld)), bits(rounded(added)));

  // The embedding without positions (a Llama's), both paths: the rows of wte.
  const int B = 3, V = 7, E = 16;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 5 + 2) % V;
  const auto wte = randn(V * E, 49);
  std::vector<float> emb(B * T * E), gemb(B * T * E);
  Bytes16Buffer vemb(B * T * E * 4);
  cpu::embedding_forward(emb.data(), tokens.data(), wte.data(), nullptr, B, T, E);
  for_each_index(B * T * E, [&](int64_t j) {
    cuda::embedding_forward_at(j, gemb.data(), tokens.data(), wte.data(), static_cast<const float*>(nullptr), T, E,
                               nullptr);
  });
  for_each_index(B * T * (E / 4), [&](int64_t v) {
    cuda::vec_embedding_forward_at<DType::kF32>(v, vemb.data(), tokens.data(), wte.data(), nullptr, T, E, nullptr);
  });
  for (int i = 0; i < B * T; ++i) {
    for (int e = 0; e < E; ++e) ASSERT_EQ(emb[i * E + e], wte[tokens[i] * E + e]);
  }
  EXPECT_EQ(bits(gemb), bits(emb));
  EXPECT_EQ(bits(operand_values(DType::kF32, vemb.data(), B * T * E)), bits(emb));
}

// The embedding 16 bytes a thread: the CPU's sums of the same (rounded)
// values, rounded once, bit for bit. C = 40: 10 vectors of fp32, 5 of bf16.
template <DType kT>
void expect_vector_embedding_is_the_cpus() {
  SCOPED_TRACE(dtype_name(kT));
  const int B = 2, T = 7, C = 40, V = 5;
  const int64_t N = int64_t(B) * T, ob = dtype_size(kT);
  std::vector<int32_t> tokens(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 3 + 1) % V);
  auto wte = randn(int64_t(V) * C, 30), wpe = randn(int64_t(T) * C, 31);
  round_to(kT, wte.data(), wte.size());
  round_to(kT, wpe.data(), wpe.size());
  Bytes16Buffer gte(wte.size() * ob), gpe(wpe.size() * ob), gout(N * C * ob);
  for (size_t i = 0; i < wte.size(); ++i) cuda::store_f32(gte.data(), kT, i, wte[i]);
  for (size_t i = 0; i < wpe.size(); ++i) cuda::store_f32(gpe.data(), kT, i, wpe[i]);
  std::vector<float> out(N * C), got(N * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  round_to(kT, out.data(), out.size());
  for_each_index(N * (C / cuda::RowVectors<kT>::W), [&](int64_t t) {
    cuda::vec_embedding_forward_at<kT>(t, gout.data(), tokens.data(), gte.data(), gpe.data(), T, C, nullptr);
  });
  for (int64_t i = 0; i < N * C; ++i) got[i] = cuda::load_f32(gout.data(), kT, i);
  EXPECT_EQ(bits(got), bits(out));
}

TEST(CudaBodies, TheEmbeddingBitForBitAndTheBiasGradientInChunksOfRows) {
  expect_vector_embedding_is_the_cpus<DType::kF32>();
  expect_vector_embedding_is_the_cpus<DType::kBF16>();

  // V < B*T: tokens repeat; token 0 at every even position and four odd
  // ones, a run of 47 (more than one scan of sixteen; two batches of
  // sixteen positions and the rest one at a time).
  const int B = 5, T = 17, C = 40, V = 9;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = i % 2 ? (i * 7 + 3) % V : 0;
  const auto wte = randn(int64_t(V) * C, 10), wpe = randn(int64_t(T) * C, 11), dout = randn(int64_t(B) * T * C, 12);
  const int64_t N = int64_t(B) * T;
  std::vector<float> out(N * C), gout(N * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for_each_index(N * C, [&](int64_t j) {
    cuda::embedding_forward_at(j, gout.data(), tokens.data(), wte.data(), wpe.data(), T, C, nullptr);
  });
  EXPECT_EQ(gout, out);
  // Packed sequences: documents of 5, 7 and 5 in each sequence (the
  // second sequence's of 1, 9 and 7), each counting from 0.
  std::vector<int32_t> pos(N), pos_order(N);
  for (int b = 0; b < B; ++b) {
    const std::vector<int> lengths = b == 1 ? std::vector{1, 9, 7} : std::vector{5, 7, 5};
    int t = 0;
    for (int len : lengths) {
      for (int i = 0; i < len; ++i) pos[b * T + t++] = i;
    }
  }
  token_order(pos.data(), N, pos_order.data());
  std::vector<float> pout(N * C), gpout(N * C);
  cpu::embedding_forward(pout.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, pos.data());
  for_each_index(N * C, [&](int64_t j) {
    cuda::embedding_forward_at(j, gpout.data(), tokens.data(), wte.data(), wpe.data(), T, C, pos.data());
  });
  for (int64_t n = 0; n < N; ++n) {
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(pout[n * C + c], wte[tokens[n] * C + c] + wpe[pos[n] * C + c]) << n << " " << c;
    }
  }
  EXPECT_EQ(bits(gpout), bits(pout));
  // The backward a token's run at a time (a block per sorted position),
  // then dwpe by element: the CPU's additions in its order, for fp32 and
  // bf16 gradients alike (the CPU's taking the bf16 values). C = 40 over
  // 8 lanes: each lane's four columns, the last group partial.
  std::vector<int32_t> order(N);
  token_order(tokens.data(), N, order.data());
  for (DType t : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint16_t> dout16(N * C);
    auto dy = dout;
    if (t == DType::kBF16) {
      convert_from_f32(t, dout.data(), dout16.data(), dy.size());
      convert_to_f32(t, dout16.data(), dy.data(), dy.size());
    }
    const cuda::ConstOperands g_dy{t == DType::kF32 ? static_cast<const void*>(dout.data()) : dout16.data(), t};
    auto dwte = randn(int64_t(V) * C, 13), dwpe = randn(int64_t(T) * C, 14);
    auto gdwte = dwte, gdwpe = dwpe;
    cpu::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C);
    for_each_index(N, [&](int64_t i) {
      for (int lane = 0; lane < 8; ++lane) {
        cuda::embedding_backward_run(i, lane, 8, gdwte.data(), g_dy, tokens.data(), order.data(), N, C);
      }
    });
    for_each_index(int64_t(T) * C,
                   [&](int64_t j) { cuda::embedding_backward_position_at(j, gdwpe.data(), g_dy, B, T, C); });
    EXPECT_EQ(bits(gdwte), bits(dwte));
    EXPECT_EQ(bits(gdwpe), bits(dwpe));
    // Packed: dwpe a position's run of rows at a time, in the CPU's order;
    // against a naive sum in row order.
    auto pdwpe = randn(int64_t(T) * C, 19), want = pdwpe, gpdwpe = pdwpe;
    for (int64_t n = 0; n < N; ++n) {
      for (int c = 0; c < C; ++c) want[pos[n] * C + c] += dy[n * C + c];
    }
    std::vector<float> ignored(int64_t(V) * C);
    cpu::embedding_backward(ignored.data(), pdwpe.data(), dy.data(), tokens.data(), B, T, C, pos.data());
    for_each_index(N, [&](int64_t i) {
      for (int lane = 0; lane < 8; ++lane) {
        cuda::embedding_backward_run(i, lane, 8, gpdwpe.data(), g_dy, pos.data(), pos_order.data(), N, C);
      }
    });
    EXPECT_EQ(bits(pdwpe), bits(want));
    EXPECT_EQ(bits(gpdwpe), bits(pdwpe));
  }

  // The bias gradient: column sums of dout [M, OC], added, over 38 chunks
  // of rows (more than a warp's lanes), the last one partial.
  const int64_t M = 600;
  const int OC = 40;
  const auto inp = randn(M * 8, 15), w = randn(8 * OC, 16), bdout = randn(M * OC, 18);
  std::vector<float> dw(8 * OC), dbias = randn(OC, 17);
  auto gdbias = dbias;
  cpu::matmul_backward(nullptr, dw.data(), dbias.data(), bdout.data(), inp.data(), w.data(), M, 8, OC);
  std::vector<float> partial(cuda::kColumnPartials);
  column_sum(
      M, OC, OC, [&](int64_t j, int64_t rows) { cuda::bias_partial_at(j, partial.data(), bdout.data(), M, OC, rows); },
      [&](int64_t o, int64_t chunks) { gdbias[o] += column_total(o, partial.data(), chunks, OC); });
  expect_close(gdbias, dbias, 1e-6f, "dbias");
}

// LayerNorm 16 bytes a lane against the CPU on the same (rounded) values:
// statistics and fp32 sums to 1e-6 of the largest, bf16 outputs to one
// rounding (2^-8 of the largest); the parameters' and the bias's partial
// sums W columns a thread are the one-column bodies' bits.
template <DType kT>
void expect_vector_layernorm_is_the_cpus() {
  SCOPED_TRACE(dtype_name(kT));
  const int64_t N = 150;
  const int C = 72, lanes = 32;  // 9 vectors of bf16 a row: some lanes idle
  const float out_tol = kT == DType::kF32 ? 1e-6f : 0x1p-8f;
  auto x = randn(N * C, 3, 2.0f), w = randn(C, 4), b = randn(C, 5), dout = randn(N * C, 6), dinp = randn(N * C, 7);
  std::vector<Bytes16Buffer> bufs;
  auto operands = [&](std::vector<float>& v) {  // v rounded to kT in place
    round_to(kT, v.data(), v.size());
    bufs.emplace_back(static_cast<int64_t>(v.size()) * dtype_size(kT));
    for (size_t i = 0; i < v.size(); ++i) cuda::store_f32(bufs.back().data(), kT, i, v[i]);
    return static_cast<void*>(bufs.back().data());
  };
  auto values = [](const void* p, int64_t n) { return operand_values(kT, p, n); };
  void *gx = operands(x), *gw = operands(w), *gb = operands(b), *gdy = operands(dout), *gdx = operands(dinp);
  std::vector<float> out(N * C, 0.0f), mean(N), rstd(N), gmean(N), grstd(N);
  void* gout = operands(out);
  ASSERT_TRUE(cuda::rows_in_vectors<kT>(C, {gx, gw, gb, gout}));
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  const int64_t ob = dtype_size(kT);
  for_each_index(N, [&](int64_t n) {
    const char* xr = static_cast<const char*>(gx) + n * C * ob;
    gmean[n] = lanes_reduce(
                   lanes, [&](int l) { return cuda::vec_row_sum<kT>(xr, C, l, lanes); }, kSum) /
               C;
    grstd[n] = cuda::layernorm_rstd(
        lanes_reduce(
            lanes, [&](int l) { return cuda::vec_row_squares_about<kT>(xr, C, gmean[n], l, lanes); }, kSum),
        C);
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_layernorm_write<kT>(static_cast<char*>(gout) + n * C * ob, xr, gw, gb, C, gmean[n], grstd[n], l, lanes);
    }
  });
  expect_close(values(gout, N * C), out, out_tol, "layernorm out");
  expect_close(gmean, mean, 1e-6f, "layernorm mean");
  // The residual's row before it: x + dout rounded, the CPU's sum's bits,
  // in place over x as the model runs it.
  std::vector<float> sum(N * C);
  cpu::residual_forward(sum.data(), x.data(), dout.data(), N * C);
  round_to(kT, sum.data(), sum.size());
  std::vector<float> res = x;
  void* gres = operands(res);
  for_each_index(N, [&](int64_t n) {
    for (int l = 0; l < lanes; ++l) {
      char* r = static_cast<char*>(gres) + n * C * ob;
      cuda::vec_residual_row<kT>(r, r, static_cast<const char*>(gdy) + n * C * ob, C, l, lanes);
    }
  });
  EXPECT_EQ(bits(values(gres, N * C)), bits(sum));
  expect_close(grstd, rstd, 1e-6f, "layernorm rstd");

  std::vector<float> dw(C), db(C);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  for_each_index(N, [&](int64_t n) {
    const char* xr = static_cast<const char*>(gx) + n * C * ob;
    const char* dy = static_cast<const char*>(gdy) + n * C * ob;
    cuda::LayerNormRowSums sums{0.0f, 0.0f};
    for (int l = 0; l < lanes; ++l) {
      const cuda::LayerNormRowSums p = cuda::vec_layernorm_backward_sums<kT>(dy, xr, gw, mean[n], rstd[n], C, l, lanes);
      sums.dnorm += p.dnorm;
      sums.dnorm_norm += p.dnorm_norm;
    }
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_layernorm_backward_write<kT>(static_cast<char*>(gdx) + n * C * ob, dy, xr, gw, mean[n], rstd[n], sums,
                                             C, l, lanes);
    }
  });
  expect_close(values(gdx, N * C), dinp, out_tol, "layernorm dinp");

  const int64_t rows = cuda::column_chunk_rows(N, 2 * C), chunks = (N + rows - 1) / rows;
  const int W = cuda::RowVectors<kT>::W;
  const cuda::ConstOperands dyv{gdy, kT}, xv{gx, kT};
  std::vector<float> one(chunks * 2 * C), vec(chunks * 2 * C);
  for_each_index(chunks * C, [&](int64_t j) {
    cuda::layernorm_params_partial_at(j, one.data(), dyv, xv, mean.data(), rstd.data(), N, C, rows);
  });
  for_each_index(chunks * (C / W), [&](int64_t j) {
    cuda::vec_layernorm_params_partial_at<kT>(j, vec.data(), gdy, gx, mean.data(), rstd.data(), N, C, rows);
  });
  EXPECT_EQ(bits(vec), bits(one));
  std::vector<float> bias_one(chunks * C), bias_vec(chunks * C);
  for_each_index(chunks * C, [&](int64_t j) { cuda::bias_partial_at(j, bias_one.data(), dyv, N, C, rows); });
  for_each_index(chunks * (C / W),
                 [&](int64_t j) { cuda::vec_bias_partial_at<kT>(j, bias_vec.data(), gdy, N, C, rows); });
  EXPECT_EQ(bits(bias_vec), bits(bias_one));
}

TEST(CudaBodies, LayerNormSixteenBytesALaneIsTheCpus) {
  expect_vector_layernorm_is_the_cpus<DType::kF32>();
  expect_vector_layernorm_is_the_cpus<DType::kBF16>();
  EXPECT_FALSE(cuda::rows_in_vectors<DType::kBF16>(76, {nullptr})) << "76 is not whole vectors of 8";
}

// A row held in registers (4, 8 or 16 vectors a lane) normalizes to the
// bits of the row read three times, and its residual sum is
// vec_residual_row's, for rows that leave lanes idle or fill them all.
template <DType kT, int kHeld>
void expect_held_row_is_the_read_rows(int C) {
  SCOPED_TRACE(::testing::Message() << dtype_name(kT) << ", C " << C);
  constexpr int lanes = 32;
  ASSERT_EQ(cuda::held_vectors<kT>(C, lanes), kHeld);
  const int64_t N = 6, ob = dtype_size(kT), n_all = N * C;
  AlignedOperands<kT> operands;
  auto values = [](const void* p, int64_t n) { return operand_values(kT, p, n); };
  void *x = operands(randn(n_all, 30, 2.0f)), *y = operands(randn(n_all, 31)), *w = operands(randn(C, 32)),
       *b = operands(randn(C, 33));
  void *read_res = operands(std::vector<float>(n_all)), *held_res = operands(std::vector<float>(n_all)),
       *read_out = operands(std::vector<float>(n_all)), *held_out = operands(std::vector<float>(n_all));
  std::vector<float> read_stats(2 * N), held_stats(2 * N);
  for_each_index(N, [&](int64_t n) {
    const int64_t at = n * C * ob;
    char* r = static_cast<char*>(read_res) + at;
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_residual_row<kT>(r, static_cast<char*>(x) + at, static_cast<char*>(y) + at, C, l, lanes);
    }
    const float m = lanes_reduce(
                        lanes, [&](int l) { return cuda::vec_row_sum<kT>(r, C, l, lanes); }, kSum) /
                    C;
    const float rs = cuda::layernorm_rstd(
        lanes_reduce(
            lanes, [&](int l) { return cuda::vec_row_squares_about<kT>(r, C, m, l, lanes); }, kSum),
        C);
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_layernorm_write<kT>(static_cast<char*>(read_out) + at, r, w, b, C, m, rs, l, lanes);
    }
    read_stats[2 * n] = m;
    read_stats[2 * n + 1] = rs;

    std::vector<cuda::HeldRow<kT, kHeld>> held;
    for (int l = 0; l < lanes; ++l) {
      held.emplace_back(C, l, lanes);
      held.back().load_sum(static_cast<char*>(held_res) + at, static_cast<char*>(x) + at, static_cast<char*>(y) + at);
    }
    const float hm = lanes_reduce(
                         lanes, [&](int l) { return held[l].sum(); }, kSum) /
                     C;
    const float hs = cuda::layernorm_rstd(lanes_reduce(
                                              lanes, [&](int l) { return held[l].squares_about(hm); }, kSum),
                                          C);
    for (int l = 0; l < lanes; ++l)
      cuda::held_layernorm_write(held[l], static_cast<char*>(held_out) + at, w, b, hm, hs);
    held_stats[2 * n] = hm;
    held_stats[2 * n + 1] = hs;
    // The same row loaded from memory holds the same values.
    for (int l = 0; l < lanes; ++l) {
      cuda::HeldRow<kT, kHeld> loaded(C, l, lanes);
      loaded.load(static_cast<char*>(held_res) + at);
      EXPECT_EQ(loaded.sum(), held[l].sum()) << "row " << n << ", lane " << l;
    }
  });
  EXPECT_EQ(bits(values(held_res, n_all)), bits(values(read_res, n_all)));
  EXPECT_EQ(bits(held_stats), bits(read_stats));
  EXPECT_EQ(bits(values(held_out, n_all)), bits(values(read_out, n_all)));
}

TEST(CudaBodies, LayerNormOfARowHeldInRegistersIsTheRowReadThreeTimes) {
  expect_held_row_is_the_read_rows<DType::kBF16, 4>(72);     // 9 vectors: lanes 9-31 idle
  expect_held_row_is_the_read_rows<DType::kF32, 4>(512);     // 128 vectors: 4 each
  expect_held_row_is_the_read_rows<DType::kBF16, 8>(1600);   // gpt2-xl: 200 vectors, 6 or 7 each
  expect_held_row_is_the_read_rows<DType::kF32, 8>(768);     // gpt2 in fp32: 192 vectors, 6 each
  expect_held_row_is_the_read_rows<DType::kBF16, 16>(4096);  // 512 vectors: 16 each
  expect_held_row_is_the_read_rows<DType::kF32, 16>(2000);   // 500 vectors, 15 or 16 each
  EXPECT_EQ(cuda::held_vectors<DType::kBF16>(4104, 32), 0) << "513 vectors: 17 a lane, read from memory";
  EXPECT_EQ(cuda::held_vectors<DType::kF32>(4096, 32), 0) << "1024 vectors: 32 a lane";
}

// RMSNorm 16 bytes a lane, fused with the residual add before it: a row
// held in registers normalizes to the bits of the row read again, the sums
// are each element's a + b rounded once, and the forward and the backward
// are the CPU's RMSNorm of the same values within fp32's tolerance, or one
// rounding of the output (2^-8 of the largest) for 16-bit operands.
template <DType kT, int kHeld>
void expect_vector_rmsnorm_is_the_cpus(int C) {
  SCOPED_TRACE(::testing::Message() << dtype_name(kT) << ", C " << C);
  constexpr int lanes = 32;
  ASSERT_EQ(cuda::held_vectors<kT>(C, lanes), kHeld);
  const int64_t N = 6, ob = dtype_size(kT), n_all = N * C;
  const float eps = 1e-5f, rel = kT == DType::kF32 ? 10 * row_tol(C) : 1.0f / 256;
  AlignedOperands<kT> operands;
  auto values = [](const void* p, int64_t n) { return operand_values(kT, p, n); };
  void *x = operands(randn(n_all, 50, 2.0f)), *y = operands(randn(n_all, 51)), *w = operands(randn(C, 52)),
       *dy = operands(randn(n_all, 53));
  void *read_res = operands(std::vector<float>(n_all)), *held_res = operands(std::vector<float>(n_all)),
       *read_out = operands(std::vector<float>(n_all)), *held_out = operands(std::vector<float>(n_all)),
       *dx = operands(randn(n_all, 54));
  const std::vector<float> dx_before = values(dx, n_all);
  std::vector<float> read_rstd(N), held_rstd(N);
  for_each_index(N, [&](int64_t n) {
    const int64_t at = n * C * ob;
    char* r = static_cast<char*>(read_res) + at;
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_residual_row<kT>(r, static_cast<char*>(x) + at, static_cast<char*>(y) + at, C, l, lanes);
    }
    read_rstd[n] = cuda::rmsnorm_rstd(
        lanes_reduce(
            lanes, [&](int l) { return cuda::vec_row_squares_about<kT>(r, C, 0.0f, l, lanes); }, kSum),
        C, eps);
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_rmsnorm_write<kT>(static_cast<char*>(read_out) + at, r, w, C, read_rstd[n], l, lanes);
    }
    std::vector<cuda::HeldRow<kT, kHeld>> held;
    for (int l = 0; l < lanes; ++l) {
      held.emplace_back(C, l, lanes);
      held.back().load_sum(static_cast<char*>(held_res) + at, static_cast<char*>(x) + at, static_cast<char*>(y) + at);
    }
    held_rstd[n] = cuda::rmsnorm_rstd(lanes_reduce(
                                          lanes, [&](int l) { return held[l].squares_about(0.0f); }, kSum),
                                      C, eps);
    for (int l = 0; l < lanes; ++l) {
      cuda::held_rmsnorm_write(held[l], static_cast<char*>(held_out) + at, w, held_rstd[n]);
    }
    const float sum = lanes_reduce(
        lanes,
        [&](int l) {
          return cuda::vec_rmsnorm_backward_sum<kT>(static_cast<char*>(dy) + at, r, w, read_rstd[n], C, l, lanes);
        },
        kSum);
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_rmsnorm_backward_write<kT>(static_cast<char*>(dx) + at, static_cast<char*>(dy) + at, r, w, read_rstd[n],
                                           sum, C, l, lanes);
    }
  });
  EXPECT_EQ(bits(values(held_res, n_all)), bits(values(read_res, n_all)));
  EXPECT_EQ(bits(held_rstd), bits(read_rstd));
  EXPECT_EQ(bits(values(held_out, n_all)), bits(values(read_out, n_all)));

  std::vector<float> sums = values(x, n_all);
  const std::vector<float> ys = values(y, n_all);
  for (int64_t i = 0; i < n_all; ++i) sums[i] += ys[i];
  if (kT != DType::kF32) round_to(kT, sums.data(), n_all);
  EXPECT_EQ(bits(values(read_res, n_all)), bits(sums));
  std::vector<float> out(n_all), rstd(N), dinp = dx_before;
  const std::vector<float> wv = values(w, C), dyv = values(dy, n_all);
  cpu::rmsnorm_forward(out.data(), rstd.data(), sums.data(), wv.data(), N, C, eps);
  cpu::rmsnorm_backward(dinp.data(), nullptr, dyv.data(), sums.data(), wv.data(), rstd.data(), N, C);
  expect_close(read_rstd, rstd, row_tol(C), "rmsnorm rstd");
  expect_close(values(read_out, n_all), out, rel, "rmsnorm out");
  expect_close(values(dx, n_all), dinp, rel, "rmsnorm dinp");
}

TEST(CudaBodies, RmsNormSixteenBytesALaneHeldOrReadIsTheCpus) {
  expect_vector_rmsnorm_is_the_cpus<DType::kBF16, 4>(72);     // 9 vectors: lanes 9-31 idle
  expect_vector_rmsnorm_is_the_cpus<DType::kF32, 8>(768);     // 192 vectors, 6 each
  expect_vector_rmsnorm_is_the_cpus<DType::kBF16, 8>(2048);   // Llama-3.2-1B: 256 vectors, 8 each
  expect_vector_rmsnorm_is_the_cpus<DType::kBF16, 16>(3584);  // Qwen2.5-7B: 448 vectors, 14 each
}

// Chunks of 16 rows, doubled until chunks x columns partials fit.
TEST(CudaBodies, ColumnSumsTakeMoreRowsAChunkRatherThanOverflowTheirPartials) {
  EXPECT_EQ(cuda::column_chunk_rows(150, 40), 16);
  EXPECT_EQ(cuda::column_chunk_rows(int64_t{1} << 20, 1024), 256);  // 4096 chunks x 1024 = 2^22
  EXPECT_EQ(cuda::column_chunk_rows(int64_t{1} << 20, 1025), 512);
  EXPECT_EQ(cuda::column_chunk_rows(10, int64_t{1} << 23), 16) << "one chunk: nothing fewer to take";
}

// The gemm calls the CUDA table makes, each run through OpenBLAS's
// column-major sgemm as cuBLAS would take it (a batched call one product
// at a time), against the CPU kernels' row-major products: 1e-5 of the
// largest value (the two layouts may sum in different orders).
// The bias, as cuBLASLt's epilogue adds it: bias[i] on row i of C.
void colmajor_gemm(const cuda::ColMajorGemm& g) {
  const auto* A = static_cast<const float*>(g.A);
  const auto* B = static_cast<const float*>(g.B);
  auto* C = static_cast<float*>(g.C);
  for (int64_t i = 0; i < g.batch; ++i) {
    cblas_sgemm(CblasColMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n,
                g.k, g.alpha, A + i * g.stride_a, g.lda, B + i * g.stride_b, g.ldb, g.beta, C + i * g.stride_c, g.ldc);
  }
  if (g.bias) {
    const auto* bias = static_cast<const float*>(g.bias);
    for (int64_t j = 0; j < g.n; ++j) {
      for (int64_t i = 0; i < g.m; ++i) C[j * g.ldc + i] += bias[i];
    }
  }
  // The GELU epilogues, element by element of C and the m x n aux.
  auto* aux = static_cast<float*>(const_cast<void*>(g.aux));
  for (int64_t j = 0; j < g.n && g.epilogue != cuda::GemmEpilogue::kNone; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      float& c = C[j * g.ldc + i];
      float& x = aux[j * g.aux_ld + i];
      if (g.epilogue == cuda::GemmEpilogue::kGeluAux) {
        x = c;
        cpu::gelu_forward(&c, &x, 1);
      } else {
        cpu::gelu_backward(&c, &x, &c, 1);
      }
    }
  }
}

TEST(CudaBodies, TheTablesColumnMajorGemmsAreTheRowMajorProducts) {
  const int64_t N = 24;
  const int C = 40, OC = 56, V = 70;
  const auto inp = randn(N * C, 90), w = randn(int64_t(C) * OC, 91), dout = randn(N * OC, 92), bias = randn(OC, 97);
  std::vector<float> out(N * OC), gout(N * OC), dinp(N * C), gdinp(N * C);
  auto dw = randn(int64_t(C) * OC, 93), gdw = dw;
  cpu::matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  colmajor_gemm(cuda::matmul_forward_gemm(gout.data(), inp.data(), w.data(), nullptr, N, C, OC));
  expect_close(gout, out, 1e-5f, "matmul forward");
  cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  colmajor_gemm(cuda::matmul_forward_gemm(gout.data(), inp.data(), w.data(), bias.data(), N, C, OC));
  expect_close(gout, out, 1e-5f, "matmul forward, the bias as the epilogue");
  cpu::matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
  colmajor_gemm(cuda::matmul_dinp_gemm(gdinp.data(), dout.data(), w.data(), N, C, OC));
  colmajor_gemm(cuda::matmul_dw_gemm(gdw.data(), dout.data(), inp.data(), N, C, OC));
  expect_close(gdinp, dinp, 1e-5f, "matmul dinp");
  expect_close(gdw, dw, 1e-5f, "matmul dw (accumulated)");

  // GELU as the epilogue: the forward product writes pre and gelu(pre),
  // the input gradient's product multiplies by gelu'(pre) of its own
  // output's shape, as the two ops in turn (the CPU table's).
  std::vector<float> pre(N * OC), gpre(N * OC), act(N * OC), gact(N * OC);
  cpu::matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  cpu::gelu_forward(act.data(), pre.data(), N * OC);
  colmajor_gemm(cuda::matmul_gelu_forward_gemm(gact.data(), gpre.data(), inp.data(), w.data(), bias.data(), N, C, OC));
  expect_close(gpre, pre, 1e-5f, "matmul forward, GELU epilogue: pre");
  expect_close(gact, act, 1e-5f, "matmul forward, GELU epilogue: gelu(pre)");
  // The backward of out[N, OC] = gelu(pre2)[N, C] @ w: pre2 [N, C].
  const auto pre2 = randn(N * C, 98);
  std::vector<float> dpre(N * C), gdpre(N * C);
  cpu::matmul_backward(dpre.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
  cpu::gelu_backward(dpre.data(), pre2.data(), dpre.data(), N * C);
  auto gpre2 = pre2;
  colmajor_gemm(cuda::matmul_dpre_gelu_gemm(gdpre.data(), gpre2.data(), dout.data(), w.data(), N, C, OC));
  expect_close(gdpre, dpre, 1e-5f, "matmul dinp, GELU gradient epilogue");
  EXPECT_EQ(gpre2, pre2) << "the backward's aux is read only";

  // The head: logits of every other row (a stride of 2C), rows of the
  // GPU's padded stride apart, then its two backward products from a
  // [rows, V] gradient of that stride, each product as its two vocabulary
  // slices (64 rows and 6).
  const int64_t rows = N / 2, ld = KernelMemory{KernelBackend::kCuda}.logits_stride(V);
  ASSERT_EQ(ld, 128);
  const cuda::VocabSlice slices[] = {cuda::vocab_head(V), cuda::vocab_tail(V)};
  ASSERT_EQ(slices[0].v1, 64);
  const auto wte = randn(int64_t(V) * C, 94), dlogits = randn(rows * V, 95);
  std::vector<float> logits(rows * V), glogits(rows * ld), hdinp(rows * C), ghdinp(rows * C), gdlogits(rows * ld);
  auto dwte = randn(int64_t(V) * C, 96), gdwte = dwte;
  cpu::classifier_logits(logits.data(), inp.data(), 2 * C, wte.data(), rows, C, V);
  for (const cuda::VocabSlice v : slices) {
    colmajor_gemm(cuda::logits_gemm(glogits.data(), ld, 4, inp.data(), 2 * C, wte.data(), 4, rows, C, v));
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(glogits.begin() + r * ld, V, glogits.begin() + r * V);
    std::copy_n(dlogits.begin() + r * V, V, gdlogits.begin() + r * ld);
  }
  glogits.resize(rows * V);
  expect_close(glogits, logits, 1e-5f, "logits");
  for (int64_t r = 0; r < rows; ++r) {  // the naive products
    for (int c = 0; c < C; ++c) {
      double d = 0.0;
      for (int v = 0; v < V; ++v) d += double(dlogits[r * V + v]) * wte[int64_t(v) * C + c];
      hdinp[r * C + c] = static_cast<float>(d);
    }
  }
  for (int v = 0; v < V; ++v) {
    for (int c = 0; c < C; ++c) {
      double d = 0.0;
      for (int64_t r = 0; r < rows; ++r) d += double(dlogits[r * V + v]) * inp[r * C + c];
      dwte[int64_t(v) * C + c] += static_cast<float>(d);
    }
  }
  for (const cuda::VocabSlice v : slices) {
    colmajor_gemm(cuda::head_dinp_gemm(ghdinp.data(), gdlogits.data(), ld, wte.data(), 4, rows, C, v));
    colmajor_gemm(cuda::head_dwte_gemm(gdwte.data(), gdlogits.data(), ld, inp.data(), 4, rows, C, v));
  }
  // A vocabulary of whole vectors has no second slice; one under 8, no first.
  EXPECT_EQ(cuda::vocab_tail(64).v1 - cuda::vocab_tail(64).v0, 0);
  EXPECT_EQ(cuda::vocab_head(5).v1, 0);
  expect_close(ghdinp, hdinp, 1e-5f, "head dinp");
  expect_close(gdwte, dwte, 1e-5f, "head dwte (accumulated)");
}

// LoRA's products on an adapter's columns [c0, c0 + out) of a wider
// product (rows ld apart), as the table runs them: one product each, the
// scale its alpha and the sums its beta, against naive sums in double (1e-5
// of the largest); the other columns are left bit for bit.
TEST(CudaBodies, LorasProductsTakeTheirColumnsInPlace) {
  const int64_t N = 20, ld = 48, c0 = 16;
  const int in = 24, r = 4, out = 12;
  const float scale = 2.5f;
  const auto x = randn(N * in, 60), a = randn(int64_t(in) * r, 61), b = randn(int64_t(r) * out, 62),
             dy = randn(N * ld, 63), y0 = randn(N * ld, 64), dx0 = randn(N * in, 65), db0 = randn(int64_t(r) * out, 66);
  const auto naive = [](int64_t rows, int64_t cols, auto at) {
    std::vector<float> v(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = static_cast<float>(at(i, j));
    }
    return v;
  };
  // u = scale x A; y[:, c0:] += u B; du = scale dy[:, c0:] B^T; dB += u^T dy[:, c0:]; dx += du A^T.
  std::vector<float> u(N * r), gu(N * r);
  u = naive(N, r, [&](int64_t n, int64_t j) {
    double d = 0;
    for (int i = 0; i < in; ++i) d += double(x[n * in + i]) * a[i * r + j];
    return scale * d;
  });
  colmajor_gemm(cuda::lora_down_gemm(gu.data(), x.data(), a.data(), N, in, r, scale));
  expect_close(gu, u, 1e-5f, "u");

  std::vector<float> y = y0, gy = y0;
  for (int64_t n = 0; n < N; ++n) {
    for (int o = 0; o < out; ++o) {
      double d = 0;
      for (int j = 0; j < r; ++j) d += double(u[n * r + j]) * b[j * out + o];
      y[n * ld + c0 + o] = static_cast<float>(y0[n * ld + c0 + o] + d);
    }
  }
  colmajor_gemm(cuda::lora_up_gemm(gy.data(), ld, c0, sizeof(float), u.data(), b.data(), N, r, out));
  expect_close(gy, y, 1e-5f, "y");
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < ld; ++c) {
      if (c < c0 || c >= c0 + out) ASSERT_EQ(gy[n * ld + c], y0[n * ld + c]) << n << ", " << c;
    }
  }

  const std::vector<float> du = naive(N, r, [&](int64_t n, int64_t j) {
    double d = 0;
    for (int o = 0; o < out; ++o) d += double(dy[n * ld + c0 + o]) * b[j * out + o];
    return scale * d;
  });
  const std::vector<float> db = naive(r, out, [&](int64_t j, int64_t o) {
    double d = db0[j * out + o];
    for (int64_t n = 0; n < N; ++n) d += double(u[n * r + j]) * dy[n * ld + c0 + o];
    return d;
  });
  const std::vector<float> dx = naive(N, in, [&](int64_t n, int64_t i) {
    double d = dx0[n * in + i];
    for (int j = 0; j < r; ++j) d += double(du[n * r + j]) * a[i * r + j];
    return d;
  });
  std::vector<float> gdu(N * r), gdb = db0, gdx = dx0;
  colmajor_gemm(cuda::lora_du_gemm(gdu.data(), dy.data(), ld, c0, sizeof(float), b.data(), N, r, out, scale));
  colmajor_gemm(cuda::lora_db_gemm(gdb.data(), dy.data(), ld, c0, sizeof(float), u.data(), N, r, out));
  colmajor_gemm(cuda::lora_dx_gemm(gdx.data(), du.data(), a.data(), N, in, r));
  expect_close(gdu, du, 1e-5f, "du");
  expect_close(gdb, db, 1e-5f, "dB (accumulated)");
  expect_close(gdx, dx, 1e-5f, "dx (accumulated)");
}

// The head's rows in fp32 registers, 16 bytes a lane, against the CPU's
// softmax in double: the loss to 1e-6 of itself (a sum of 300
// exponentials in fp32), the gradient to 1e-6 of the largest; with bf16
// logits (the CPU's taking the bf16 values) the gradient, written back in
// bf16, to 2^-8 of the largest. V = 300: 37 vectors of bf16 and 4 left.
// Each row read twice from z, or once with its vectors kept in a copy
// (the GPU's shared memory) past the kHeld a lane keeps in registers.
template <DType kT, int kHeld>
void expect_softmax_rows_are_the_cpus(int lanes, bool shared) {
  SCOPED_TRACE(::testing::Message() << dtype_name(kT) << ", " << lanes << " lanes, " << kHeld << " held"
                                    << (shared ? ", shared" : ""));
  const int64_t rows = 6;
  const int V = 300, ld = 320;
  const std::vector<int32_t> targets = {0, 299, 17, 150, 3, 296};
  // The copy, and a vector past it that no lane may write.
  const int64_t copy_bytes = cuda::softmax_copy_bytes<kT>(V, int64_t{kHeld} * lanes);
  Bytes16Buffer copy(copy_bytes + 16);
  std::memset(copy.data(), 0xab, copy_bytes + 16);
  auto logits = randn(rows * V, 20, 4.0f);
  round_to(kT, logits.data(), logits.size());
  Bytes16Buffer buf(rows * ld * dtype_size(kT));
  void* g = buf.data();
  const int64_t ob = dtype_size(kT);
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < V; ++i) cuda::store_f32(g, kT, r * ld + i, logits[r * V + i]);
  }
  std::vector<double> losses(rows), glosses(rows);
  cpu::softmax_cross_entropy(logits.data(), losses.data(), targets.data(), rows, V, 0.25f);
  std::vector<float> glogits(rows * V);
  for_each_index(rows, [&](int64_t r) {
    void* z = static_cast<char*>(g) + r * ld * ob;
    const float z_target = cuda::load_f32(z, kT, targets[r]);
    std::vector<cuda::SoftmaxPart> parts(lanes);
    std::vector<cuda::HeldVectors<kHeld>> held(lanes);
    void* c = shared ? copy.data() : nullptr;
    for (int l = 0; l < lanes; ++l) parts[l] = cuda::vec_logits_row_part<kT>(z, V, l, lanes, held[l], c);
    const float M = lanes_reduce(
        lanes, [&](int l) { return parts[l].max; }, kMax);
    const float S = lanes_reduce(
        lanes, [&](int l) { return cuda::softmax_part_sum(parts[l], M); }, kSum);
    glosses[r] = cuda::softmax_loss(z_target, M, S);
    if (shared) {  // the gradient's pass must read the whole vectors from the registers and the copy alone
      const int whole = V / cuda::RowVectors<kT>::W * cuda::RowVectors<kT>::W;
      for (int i = 0; i < whole; ++i) cuda::store_f32(z, kT, i, std::nanf(""));
    }
    for (int l = 0; l < lanes; ++l) {
      cuda::vec_softmax_grad_write<kT>(z, held[l], c, V, targets[r], M, S, 0.25f, l, lanes);
    }
    for (int i = 0; i < V; ++i) glogits[r * V + i] = cuda::load_f32(z, kT, i);
  });
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(glosses[r], losses[r], 1e-6 * losses[r]) << r;
  expect_close(glogits, logits, kT == DType::kF32 ? 1e-6f : 0x1p-8f, "dlogits");
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<uint8_t>(copy.data()[copy_bytes + i]), 0xab) << i;
}

TEST(CudaBodies, SoftmaxCrossEntropyRowsAndChunkedSumOfSquaresAreTheCpuKernels) {
  // 256 lanes, more than a row has vectors, so that lanes without columns
  // join in too; 8, so that a lane loads several batches of four.
  for (int lanes : {256, 8}) {
    for (bool shared : {false, true}) {
      expect_softmax_rows_are_the_cpus<DType::kF32, 0>(lanes, shared);
      expect_softmax_rows_are_the_cpus<DType::kBF16, 0>(lanes, shared);
    }
  }
  // Registers and shared memory: 8 lanes holding 2 vectors each (16 of
  // bf16's 37 and fp32's 75, the rest in the copy), and 16 each (the whole
  // row in registers, the copy empty).
  expect_softmax_rows_are_the_cpus<DType::kF32, 2>(8, true);
  expect_softmax_rows_are_the_cpus<DType::kBF16, 2>(8, true);
  expect_softmax_rows_are_the_cpus<DType::kF32, 16>(8, true);
  expect_softmax_rows_are_the_cpus<DType::kBF16, 16>(8, true);
  EXPECT_EQ(cuda::softmax_copy_bytes<DType::kBF16>(300, 16), 21 * 16);
  EXPECT_EQ(cuda::softmax_copy_bytes<DType::kBF16>(300, 128), 0);

  // Three chunks, the last one partial, each on a block of kSquaresLanes
  // lanes, then the partials on one block.
  const int64_t n = 2 * cpu::kSquaresChunk + 1234;
  const auto x = randn(n, 21);
  const int64_t chunks = (n + cpu::kSquaresChunk - 1) / cpu::kSquaresChunk;
  ASSERT_EQ(chunks, 3);
  std::vector<double> partial(chunks);
  for_each_index(chunks, [&](int64_t c) {
    partial[c] = block_tree_sum([&](int l) { return cuda::squares_lane(x.data(), n, c, l); });
  });
  const double total = block_tree_sum([&](int l) { return cuda::lane_share(partial.data(), chunks, l); });
  EXPECT_EQ(total, cpu::sum_squares(x.data(), n));

  // The losses' sum on one block (more doubles than lanes, not a multiple
  // of them), against the CPU's in index order to 1e-12.
  std::vector<double> losses(1000);
  for (size_t i = 0; i < losses.size(); ++i) losses[i] = 10.0 + std::sin(double(i));
  const int64_t m = static_cast<int64_t>(losses.size());
  const double loss = block_tree_sum([&](int l) { return cuda::lane_share(losses.data(), m, l); });
  EXPECT_EQ(loss, cpu::sum_in_lanes(losses.data(), m));
  EXPECT_NEAR(loss, cpu::sum(losses.data(), m), 1e-12 * loss);
}

// attention_plan.h's executor on the CPU: each batched gemm as OpenBLAS
// calls, each row of scores on 32 lanes in turn.
struct CpuAttentionExec {
  static constexpr int kLanes = 32;
  void gemm(const cuda::ColMajorGemm& g) { colmajor_gemm(g); }
  void softmax_rows(float* S, float* lse, int T, int64_t rows, int64_t lse_stride, const int32_t* pos) {
    for_each_index(rows, [&](int64_t r) {
      float* row = S + r * T;
      const int64_t t = r % T, lo = cuda::first_key(pos, t);
      const float mx = lanes_reduce(
          kLanes, [&](int l) { return cuda::softmax_row_max(row, lo, t, l, kLanes); }, kMax);
      const float sum = lanes_reduce(
          kLanes, [&](int l) { return cuda::softmax_row_sum(row, lo, t, mx, l, kLanes); }, kSum);
      for (int l = 0; l < kLanes; ++l) cuda::softmax_row_write(row, lo, t, T, mx, 1.0f / sum, l, kLanes);
      lse[r / T * lse_stride + t] = mx + std::log(sum);
    });
  }
  void backward_rows(float* P, float* dP, const float* lse, int T, int64_t rows, int64_t lse_stride,
                     const int32_t* pos) {
    for_each_index(rows, [&](int64_t r) {
      const int64_t t = r % T, lo = cuda::first_key(pos, t);
      const float l0 = lse[r / T * lse_stride + t];
      const float D = lanes_reduce(
          kLanes, [&](int l) { return cuda::probabilities_row(P + r * T, dP + r * T, lo, t, T, l0, l, kLanes); }, kSum);
      for (int l = 0; l < kLanes; ++l) cuda::softmax_backward_row(P + r * T, dP + r * T, lo, t, T, D, l, kLanes);
    });
  }
};

// The plan against the CPU kernel, multi-head and grouped-query, in chunks
// of every head and of fewer (the last chunk smaller); the statistic lse
// against a log-sum-exp taken in double from q and k.
TEST(CudaBodies, AttentionsPlanMatchesTheCpuKernel) {
  for (const auto& [NH, KV] : {std::pair(3, 3), std::pair(6, 3), std::pair(4, 1)}) {
    const int B = 2, T = 32, C = 48, hs = C / NH;
    const int64_t N = int64_t(B) * T, R = int64_t(B) * NH * T, W = C + 2 * int64_t(KV) * hs;
    const auto qkv = randn(N * W, 30), dout = randn(N * C, 31);
    std::vector<float> out(N * C), stats(R * 2), dqkv(N * W), scratch(cpu::attention_scratch_floats(T));
    cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                            DType::kF32);
    ASSERT_EQ(cuda::attention_chunk_heads(T, NH), NH);
    for (int chunk_heads : {NH, 2}) {
      SCOPED_TRACE(::testing::Message() << NH << " heads over " << KV << ", " << chunk_heads << " heads a chunk");
      std::vector<float> gout(N * C, 7.0f), lse(R), gdqkv(N * W, 7.0f), gscratch(2 * int64_t(chunk_heads) * T * T);
      CpuAttentionExec x;
      cuda::attention_forward_plan(x, gout.data(), lse.data(), gscratch.data(), qkv.data(), B, T, C, NH, KV,
                                   chunk_heads);
      expect_close(gout, out, 2e-6f, "attention out");
      for (int64_t r = 0; r < R; ++r) {
        const int64_t t = r % T, h = (r / T) % NH, b = r / (int64_t(T) * NH);
        double z = 0.0;
        const float* q = qkv.data() + (b * T + t) * W + h * hs;
        for (int64_t s = 0; s <= t; ++s) {
          const float* k = qkv.data() + (b * T + s) * W + C + h / (NH / KV) * hs;
          double dot = 0.0;
          for (int d = 0; d < hs; ++d) dot += double(q[d]) * k[d];
          z += std::exp(dot / std::sqrt(double(hs)));
        }
        ASSERT_NEAR(lse[r], std::log(z), 1e-5) << "row " << r;
      }
      cuda::attention_backward_plan(x, gdqkv.data(), dout.data(), qkv.data(), lse.data(), gscratch.data(), B, T, C, NH,
                                    KV, chunk_heads);
      expect_close(gdqkv, dqkv, 2e-6f, "attention dqkv");
    }
  }
}

// Packed sequences through the plan: the whole [T, T] products, each row
// masked to its document's keys, against the CPU kernel's documents.
TEST(CudaBodies, AttentionsPlanMasksPackedDocumentsAsTheCpuKernel) {
  for (const auto& [NH, KV] : {std::pair(3, 3), std::pair(4, 2)}) {
    const int B = 2, T = 32, C = 48, hs = C / NH;
    std::vector<int32_t> pos(int64_t(B) * T);
    for (int t = 0; t < T; ++t) {
      pos[t] = t < 1 ? t : t < 8 ? t - 1 : t - 8;  // documents of 1, 7 and 24
      pos[T + t] = t % 16;                         // two of 16
    }
    const int64_t N = int64_t(B) * T, R = int64_t(B) * NH * T, W = C + 2 * int64_t(KV) * hs;
    const auto qkv = randn(N * W, 32), dout = randn(N * C, 33);
    std::vector<float> out(N * C), stats(R * 2), dqkv(N * W), scratch(cpu::attention_scratch_floats(T));
    cpu::attention_forward(out.data(), stats.data(), scratch.data(), qkv.data(), B, T, C, NH, KV, pos.data());
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), stats.data(), scratch.data(), B, T, C, NH, KV,
                            DType::kF32, pos.data());
    SCOPED_TRACE(::testing::Message() << NH << " heads over " << KV);
    std::vector<float> gout(N * C, 7.0f), lse(R), gdqkv(N * W, 7.0f), gscratch(2 * int64_t(NH) * T * T);
    CpuAttentionExec x;
    cuda::attention_forward_plan(x, gout.data(), lse.data(), gscratch.data(), qkv.data(), B, T, C, NH, KV, NH,
                                 pos.data());
    expect_close(gout, out, 2e-6f, "packed attention out");
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r % T, b = r / (int64_t(T) * NH);
      const float* st = stats.data() + 2 * r;
      ASSERT_NEAR(lse[r], st[0] - std::log(st[1]), 1e-5) << "row " << r << " of sequence " << b << " at " << t;
    }
    cuda::attention_backward_plan(x, gdqkv.data(), dout.data(), qkv.data(), lse.data(), gscratch.data(), B, T, C, NH,
                                  KV, NH, pos.data());
    expect_close(gdqkv, dqkv, 2e-6f, "packed attention dqkv");
  }
}

// Two chunks' matrices fit the scratch; long sequences take fewer heads a
// chunk, never none.
TEST(CudaBodies, AttentionsScratchBoundsTheHeadsOfAChunk) {
  EXPECT_EQ(cuda::attention_chunk_heads(1024, 25), 25);
  EXPECT_EQ(cuda::attention_chunk_heads(2048, 25), 8);  // 2 x 8 x 2048^2 = 2^26 floats
  EXPECT_EQ(cuda::attention_chunk_heads(8192, 16), 1);
  EXPECT_EQ(cuda::attention_scratch_floats(2048, 25), int64_t{1} << 26);
  EXPECT_EQ(cuda::attention_scratch_floats(64, 4), 2 * 4 * 64 * 64);
}

TEST(CudaBodies, CastsAreDtypeHsConversionsBitForBit) {
  auto x = randn(4096, 40, 1000.0f);
  x.push_back(70000.0f);  // past fp16's range
  x.push_back(-0.0f);
  x.push_back(1e-8f);  // fp16 subnormal
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<float> want = x;
    round_to(t, want.data(), want.size());
    std::vector<uint16_t> packed(x.size()), gpacked(x.size());
    convert_from_f32(t, x.data(), packed.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(cuda::round_f32(t, x[i])), std::bit_cast<uint32_t>(want[i])) << i;
      cuda::store_f32(gpacked.data(), t, int64_t(i), x[i]);
      ASSERT_EQ(std::bit_cast<uint32_t>(cuda::load_f32(packed.data(), t, int64_t(i))), std::bit_cast<uint32_t>(want[i]))
          << i;
    }
    EXPECT_EQ(gpacked, packed) << dtype_name(t);
  }
}

// Gradients of each type, with and without a 16-bit copy: the body's
// update is adam_update's, bit for bit.
TEST(CudaBodies, AdamIsTheCpuUpdateBitForBit) {
  const int64_t n = 1000;
  const AdamStep step = make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 3e-3f, 7, 0.5f, true);
  for (DType gt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool with16 : {false, true}) {
      const auto g32 = randn(n, 50, 0.1f);
      std::vector<uint16_t> g16(n);
      if (gt != DType::kF32) convert_from_f32(gt, g32.data(), g16.data(), n);
      auto p = randn(n, 51), m = randn(n, 52, 0.01f), v = randn(n, 53, 0.001f);
      for (float& x : v) x = std::fabs(x);
      auto gp = p, gm = m, gv = v;
      std::vector<uint16_t> p16(n), gp16(n);
      AdamTensor t{p.data(),     m.data(),
                   v.data(),     gt == DType::kF32 ? static_cast<const void*>(g32.data()) : g16.data(),
                   gt,           with16 ? p16.data() : nullptr,
                   DType::kBF16, n};
      AdamTensor gt_tensor = t;
      gt_tensor.param = gp.data();
      gt_tensor.m = gm.data();
      gt_tensor.v = gv.data();
      gt_tensor.param16 = with16 ? gp16.data() : nullptr;
      adam_update(t, step, CpuIsa::kScalar);
      for_each_index(n, [&](int64_t i) { cuda::adam_at(i, gt_tensor, step); });
      EXPECT_EQ(bits(gp), bits(p)) << dtype_name(gt) << " " << with16;
      EXPECT_EQ(bits(gm), bits(m));
      EXPECT_EQ(bits(gv), bits(v));
      EXPECT_EQ(gp16, p16);
    }
  }
}

// 60 tensors (30 of them empty, which take no part of a launch), each
// with its own step, updated in groups of kGroupTensors a launch over each
// group's grid: each the CPU's update of it, bit for bit. The same
// grouping counted in 8-bit blocks maps each block to its tensor's.
TEST(CudaBodies, AdamInGroupsOfTensorsIsEachTensorsCpuUpdate) {
  const int count = 60;
  std::vector<std::vector<float>> p(count), m(count), v(count), g(count);
  std::vector<AdamTensor> ts;
  std::vector<AdamStep> steps;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i % 2 ? 37 * i + 5 : 0;
    p[i] = randn(n, 100 + i);
    m[i] = randn(n, 200 + i, 0.01f);
    v[i] = randn(n, 300 + i, 0.001f);
    for (float& x : v[i]) x = std::fabs(x);
    g[i] = randn(n, 400 + i, 0.1f);
    ts.push_back({p[i].data(), m[i].data(), v[i].data(), g[i].data(), DType::kF32, nullptr, DType::kBF16, n});
    steps.push_back(make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 1e-3f * (1 + i % 3), 5, 0.5f, i % 4 < 2));
  }
  auto gp = p, gm = m, gv = v;
  std::vector<AdamTensor> gts = ts;
  for (int i = 0; i < count; ++i) {
    gts[i].param = gp[i].data();
    gts[i].m = gm[i].data();
    gts[i].v = gv[i].data();
  }
  for (int i = 0; i < count; ++i) adam_update(ts[i], steps[i], CpuIsa::kScalar);
  int launches = 0;
  cuda::for_groups<AdamTensor>(
      gts, steps, [](const AdamTensor& t) { return t.n; },
      [&](const cuda::TensorGroup<AdamTensor>& grp) {
        ++launches;
        for_each_index(grp.start[grp.count], [&](int64_t i) { cuda::adam_group_at(i, grp); });
      });
  EXPECT_EQ(launches, 2);  // 30 non-empty tensors: 24, then 6
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(bits(gp[i]), bits(p[i])) << i;
    EXPECT_EQ(bits(gm[i]), bits(m[i])) << i;
    EXPECT_EQ(bits(gv[i]), bits(v[i])) << i;
  }

  // In 8-bit blocks: each launch's block b is block b - start[j] of its
  // member j, and every block of every non-empty tensor has one.
  std::vector<Adam8bitTensor> qs(count);
  for (int i = 0; i < count; ++i) qs[i].n = i % 2 ? 300 * i : 0;
  std::vector<std::pair<int64_t, int64_t>> seen;  // (n of the tensor, block)
  cuda::for_groups<Adam8bitTensor>(
      qs, steps, [](const Adam8bitTensor& t) { return quant_blocks(t.n); },
      [&](const cuda::TensorGroup<Adam8bitTensor>& grp) {
        for (int64_t b = 0; b < grp.start[grp.count]; ++b) {
          const int j = cuda::group_member(grp, b);
          seen.emplace_back(grp.t[j].n, b - grp.start[j]);
        }
      });
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int i = 0; i < count; ++i) {
    for (int64_t b = 0; b < quant_blocks(qs[i].n); ++b) want.emplace_back(qs[i].n, b);
  }
  EXPECT_EQ(seen, want);
}

// A group whose steps point at their factor (AdamStep::grad_scale_at, set
// by update_factor on the device): each member's update is the CPU's with
// that factor given, bit for bit; a factor that is not finite leaves every
// member as it was.
TEST(CudaBodies, AGroupReadsItsFactorAndSkipsANonFiniteOne) {
  const int count = 5;
  for (const float value : {0.25f, NAN}) {
    SCOPED_TRACE(value);
    float factor = value;
    std::vector<std::vector<float>> p(count), m(count), v(count), g(count);
    std::vector<AdamTensor> ts, want;
    std::vector<AdamStep> steps, given;
    for (int i = 0; i < count; ++i) {
      const int64_t n = 29 * i + 3;
      p[i] = randn(n, 500 + i);
      m[i] = randn(n, 510 + i, 0.01f);
      v[i] = randn(n, 520 + i, 0.001f);
      for (float& x : v[i]) x = std::fabs(x);
      g[i] = randn(n, 530 + i, 0.1f);
      ts.push_back({p[i].data(), m[i].data(), v[i].data(), g[i].data(), DType::kF32, nullptr, DType::kBF16, n});
      given.push_back(make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 1e-3f, 4, value, i % 2 == 0));
      steps.push_back(given.back());
      steps.back().grad_scale = 1.0f;
      steps.back().grad_scale_at = &factor;
    }
    auto wp = p, wm = m, wv = v;
    for (int i = 0; i < count; ++i) {
      want.push_back(
          {wp[i].data(), wm[i].data(), wv[i].data(), g[i].data(), DType::kF32, nullptr, DType::kBF16, ts[i].n});
      if (!std::isnan(value)) adam_update(want[i], given[i], CpuIsa::kScalar);
    }
    cuda::for_groups<AdamTensor>(
        ts, steps, [](const AdamTensor& t) { return t.n; },
        [&](const cuda::TensorGroup<AdamTensor>& grp) {
          for_each_index(grp.start[grp.count], [&](int64_t i) { cuda::adam_group_at(i, grp); });
        });
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(bits(p[i]), bits(wp[i])) << i;
      EXPECT_EQ(bits(m[i]), bits(wm[i])) << i;
      EXPECT_EQ(bits(v[i]), bits(wv[i])) << i;
    }
  }
}

// The update factor as the GPU's one thread computes it: the units' sums
// added in order, and the unscaled, clipped factor of their total.
TEST(CudaBodies, TheUpdateFactorOfSumsAddsThemInOrder) {
  const std::vector<double> sums = {3.0, 1e-3, 250.0, 0.125};
  float factor = 0;
  double sumsq = 0;
  update_factor_of_sums(sums.data(), static_cast<int>(sums.size()), 512.0, 0.01, &factor, &sumsq);
  EXPECT_EQ(sumsq, ((3.0 + 1e-3) + 250.0) + 0.125);
  // The unscaled norm, about 0.031, is past the clip.
  EXPECT_EQ(factor, static_cast<float>(0.01 / (std::sqrt(sumsq) / 512.0 + 1e-6) / 512.0));
}

// Sums of squares of many tensors in groups: each tensor's chunks on a
// block, then its total over their partials, as the GPU's two launches a
// group run them; each is cpu::sum_squares of the tensor alone, bit for
// bit. Empty tensors among them (sum 0), one of three chunks; groups
// closed at kSquaresGroup tensors and, with 5 partials, where the next
// tensor's chunks would not fit.
TEST(CudaBodies, SumsOfSquaresOfManyTensorsInGroupsAreEachTheCpus) {
  const int count = cuda::kSquaresGroup + 7;
  std::vector<std::vector<float>> xs(count);
  std::vector<double> got(count, -1.0);
  std::vector<SquaresOf> ts;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 3 ? 2 * cpu::kSquaresChunk + 5 : i % 10 == 9 ? 0 : 37 * i + 1;
    xs[i] = randn(n, 80 + i);
    ts.push_back({xs[i].data(), n, &got[i]});
  }
  for (const int64_t max_chunks : {int64_t{1} << 16, int64_t{5}}) {
    SCOPED_TRACE(max_chunks);
    std::fill(got.begin(), got.end(), -1.0);
    std::vector<int> sizes;
    cuda::for_squares_groups(ts.data(), ts.size(), max_chunks, [&](const cuda::SquaresGroup& g) {
      sizes.push_back(g.count);
      ASSERT_LE(g.start[g.count], max_chunks);
      std::vector<double> partial(g.start[g.count]);
      for_each_index(g.start[g.count], [&](int64_t c) {
        partial[c] = block_tree_sum([&](int l) { return cuda::squares_group_lane(g, c, l); });
      });
      for_each_index(g.count, [&](int64_t j) {
        *g.t[j].out =
            block_tree_sum([&](int l) { return cuda::squares_total_lane(g, partial.data(), static_cast<int>(j), l); });
      });
    });
    for (int i = 0; i < count; ++i) EXPECT_EQ(got[i], cpu::sum_squares(xs[i].data(), ts[i].n)) << i;
    if (max_chunks == 5) {
      // Chunks 1, 1, 1, then 3 (tensor 3): 6 would not fit, so tensors 0-2;
      // 3, 4, 5 (3 + 1 + 1); then 6-11, tensor 9 empty (five chunks).
      ASSERT_GE(sizes.size(), 3u);
      EXPECT_EQ(std::vector<int>(sizes.begin(), sizes.begin() + 3), (std::vector<int>{3, 3, 6}));
    } else {
      EXPECT_EQ(sizes, (std::vector<int>{cuda::kSquaresGroup, 7}));
    }
  }
}

// Every value at and one ulp either side of each of the map's edges, and
// random ones: quantize_code picks the CPU quantizer's code.
TEST(CudaBodies, QuantizeCodeIsTheCpuQuantizersCode) {
  for (const QuantMap* q : {&signed_dynamic_map(), &unsigned_dynamic_map()}) {
    std::vector<float> x = randn(20000, 60, 0.3f);
    for (int32_t t = 0; t + 1 < q->num_mag; ++t) {
      for (float e : {q->thr[t], std::nextafter(q->thr[t], 0.0f), std::nextafter(q->thr[t], 2.0f)}) {
        x.push_back(e);
        if (q->is_signed) x.push_back(-e);
      }
    }
    if (!q->is_signed) {
      for (float& e : x) e = std::fabs(e);
    }
    // Each value in a block beside 1.0, so that the block's absmax is 1
    // and the value is its own scaled x (values past 1 are skipped).
    for (float e : x) {
      const float pair[2] = {e, 1.0f};
      uint8_t codes[2];
      float absmax = 0.0f;
      quantize_blockwise(*q, pair, 2, codes, &absmax, CpuIsa::kScalar);
      if (absmax != 1.0f) continue;
      const uint8_t code = cuda::quantize_code(*q, e * (2 * cuda::inverse_or_zero(absmax)));
      ASSERT_EQ(code, codes[0]) << (q->is_signed ? "signed" : "unsigned") << " map, value " << e;
      ASSERT_EQ(cuda::dequantize_code(*q, code, 0.5f), q->code[code] * 0.5f);
    }
  }
}

// NF4 dequantization into a product's operands over its grid: runs of 16
// weights with one absmax (cols a multiple of 16, rows not of 64, several
// groups of absmax values) and weight by weight (cols not), into fp32 and
// bf16 operands with room past the rows: the CPU's transposed weights, as
// the operand type rounds them, and nothing past the rows written.
TEST(CudaBodies, Nf4DequantizationIsTheCpusTransposeBitForBit) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape sh : {Shape{300, 192}, Shape{70, 256}, Shape{70, 3 * kNf4Block + 5}, Shape{1, 16}}) {
    const int64_t n = sh.rows * sh.cols, ld = sh.rows + 5;
    const auto x = randn(n, 90, 0.05f);
    const Nf4HostTensor h(n);
    const Nf4Tensor& t = h.t;
    nf4_quantize(x.data(), t);
    std::vector<float> want(sh.cols * ld, -3.0f);
    nf4_dequantize_transposed(t, sh.rows, sh.cols, ld, want.data());
    cuda::Nf4Values v;
    std::copy(nf4_values().begin(), nf4_values().end(), v.v);
    const Nf4Transpose d{sh.rows, sh.cols, ld};
    std::vector<float> got(sh.cols * ld, -3.0f);
    for_each_index(d.threads(), [&](int64_t k) {
      cuda::nf4_transposed_run<DType::kF32>(k, t, d, v, got.data());
    });
    EXPECT_EQ(bits(got), bits(want)) << sh.rows << " x " << sh.cols;
    std::vector<uint16_t> half(sh.cols * ld, 0xBEEF);
    for_each_index(d.threads(), [&](int64_t k) {
      cuda::nf4_transposed_run<DType::kBF16>(k, t, d, v, half.data());
    });
    for (int64_t i = 0; i < sh.cols * ld; ++i) {
      ASSERT_EQ(half[i], i % ld < sh.rows ? float_to_bf16(want[i]) : 0xBEEF)
          << sh.rows << " x " << sh.cols << ": " << i;
    }
  }
}

// The 8-bit kernel's schedule on the CPU: per block, every element's
// update, the block's max, then each element's code; against
// adam8bit_update over several steps and a partial last block.
TEST(CudaBodies, EightBitAdamIsTheCpuUpdateBitForBit) {
  const int64_t n = 5 * kQuantBlock + 77, blocks = quant_blocks(n);
  const AdamStep step = make_adam_step(AdamHyper{0.9f, 0.999f, 1e-8f, 0.01f, true}, 1e-3f, 3, 1.0f, true);
  auto p = randn(n, 70);
  std::vector<uint8_t> m(n), v(n);
  std::vector<float> mabs(blocks), vabs(blocks);
  Adam8bitTensor t{p.data(), m.data(),    v.data(), mabs.data(),  vabs.data(),
                   nullptr,  DType::kF32, nullptr,  DType::kBF16, n};
  adam8bit_zero_states(t);
  auto gp = p;
  auto gm = m, gv = v;
  auto gmabs = mabs, gvabs = vabs;
  Adam8bitTensor g = t;
  g.param = gp.data();
  g.m = gm.data();
  g.v = gv.data();
  g.m_absmax = gmabs.data();
  g.v_absmax = gvabs.data();
  const QuantMap& qm = signed_dynamic_map();
  const QuantMap& qv = unsigned_dynamic_map();
  for (int s = 0; s < 4; ++s) {
    const auto grad = randn(n, 80 + s, 0.05f);
    t.grad = g.grad = grad.data();
    adam8bit_update(t, step, CpuIsa::kScalar);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      float mn[kQuantBlock], vn[kQuantBlock], m_abs = 0.0f, v_abs = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) {  // the block's threads
        const int64_t i = blk * kQuantBlock + j;
        mn[j] = vn[j] = 0.0f;
        if (i < n) cuda::adam8bit_at(i, g, step, qm, qv, mn[j], vn[j]);
        m_abs = std::max(m_abs, std::fabs(mn[j]));
        v_abs = std::max(v_abs, vn[j]);
      }
      for (int j = 0; j < kQuantBlock && blk * kQuantBlock + j < n; ++j) {
        gm[blk * kQuantBlock + j] = cuda::quantize_code(qm, mn[j] * (2 * cuda::inverse_or_zero(m_abs)));
        gv[blk * kQuantBlock + j] = cuda::quantize_code(qv, vn[j] * (2 * cuda::inverse_or_zero(v_abs)));
      }
      gmabs[blk] = m_abs;
      gvabs[blk] = v_abs;
    }
    ASSERT_EQ(bits(gp), bits(p)) << "step " << s;
    ASSERT_EQ(gm, m) << "step " << s;
    ASSERT_EQ(gv, v) << "step " << s;
    ASSERT_EQ(bits(gmabs), bits(mabs)) << "step " << s;
    ASSERT_EQ(bits(gvabs), bits(vabs)) << "step " << s;
  }
}

// The CPU table with the GPU's attention: only per-row statistics kept,
// the plan run by the CPU executor. The model trained with it must compute
// the CPU model's loss and gradients: this checks, without a GPU, the
// model's side of an attention that keeps no probabilities (the saved
// fields, the scratch, checkpointing and 16-bit activations).
class PlanAttentionTable : public Kernels {
 public:
  explicit PlanAttentionTable(std::unique_ptr<Kernels> cpu) : k_(std::move(cpu)) {}
  KernelMemory memory() const override { return {KernelBackend::kCuda}; }
  DType operand_type() const override { return DType::kF32; }
  void attention_forward(Stream& s, void* out, float* lse, float* scratch, const void* qkv, int B, int T, int C, int NH,
                         int KV, const int32_t* pos = nullptr) override {
    CpuDevice::launch(s, [=] {
      CpuAttentionExec x;
      cuda::attention_forward_plan(x, static_cast<float*>(out), lse, scratch, static_cast<const float*>(qkv), B, T, C,
                                   NH, KV, cuda::attention_chunk_heads(T, NH), pos);
    });
  }
  // As the CUDA table, it rounds nothing.
  void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void*, const float* lse,
                          float* scratch, int B, int T, int C, int NH, int KV, DType,
                          const int32_t* pos = nullptr) override {
    CpuDevice::launch(s, [=] {
      CpuAttentionExec x;
      cuda::attention_backward_plan(x, static_cast<float*>(dqkv), static_cast<const float*>(dout),
                                    static_cast<const float*>(qkv), lse, scratch, B, T, C, NH, KV,
                                    cuda::attention_chunk_heads(T, NH), pos);
    });
  }
  void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                      int OC) override {
    k_->matmul_forward(s, out, inp, w, bias, N, C, OC);
  }
  void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       int64_t N, int C, int OC) override {
    k_->matmul_backward(s, dinp, dw, dbias, dout, inp, w, N, C, OC);
  }
  void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w, const void* b,
                         int64_t N, int C) override {
    k_->layernorm_forward(s, out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp, const void* w,
                          const float* mean, const float* rstd, int64_t N, int C) override {
    k_->layernorm_backward(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                       float eps) override {
    k_->rmsnorm_forward(s, out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int64_t N, int C) override {
    k_->rmsnorm_backward(s, dinp, dw, dout, inp, w, rstd, N, C);
  }
  void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) override {
    k_->swiglu_forward(s, out, inp, N, F);
  }
  void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    k_->swiglu_backward(s, dinp, inp, dout, N, F);
  }
  void rope_forward(Stream& s, void* qkv, const float* table, const RopeShape& shape, int64_t N) override {
    k_->rope_forward(s, qkv, table, shape, N);
  }
  void rope_backward(Stream& s, void* dqkv, const float* table, const RopeShape& shape, int64_t N) override {
    k_->rope_backward(s, dqkv, table, shape, N);
  }
  void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) override {
    k_->take_columns(s, out, x, ld, c0, N, n);
  }
  void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) override {
    k_->add_columns(s, y, ld, c0, t, N, n);
  }
  void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) override { k_->gelu_forward(s, out, inp, n); }
  void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) override {
    k_->gelu_backward(s, dinp, inp, dout, n);
  }
  void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) override {
    k_->residual_forward(s, out, a, b, n);
  }
  void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T,
                         int C, const int32_t* pos = nullptr) override {
    k_->embedding_forward(s, out, tokens, wte, wpe, B, T, C, pos);
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* order, int B, int T, int C, const int32_t* pos = nullptr,
                          const int32_t* pos_order = nullptr) override {
    k_->embedding_backward(s, dwte, dwpe, dout, tokens, order, B, T, C, pos, pos_order);
  }
  void classifier_logits(Stream& s, float* logits, const void* inp, int64_t stride, const void* wte, int64_t rows,
                         int C, int V) override {
    k_->classifier_logits(s, logits, inp, stride, wte, rows, C, V);
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    k_->classifier_forward_backward(s, a);
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override { k_->round_to(s, t, x, n); }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    k_->convert_from_f32(s, to, src, dst, n);
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    k_->convert_to_f32(s, from, src, dst, n);
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override { k_->sum(s, x, n, out); }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override { k_->sum_squares(s, x, n, out); }
  void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                     double* sumsq) override {
    k_->update_factor(s, sums, n, loss_scale, clip, factor, sumsq);
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override { k_->add(s, dst, src, n); }
  void scale(Stream& s, void* x, float a, int64_t n) override { k_->scale(s, x, a, n); }
  void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) override {
    k_->dropout(s, y, x, n, p, seed);
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override { k_->adam(s, t, step); }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override { k_->adam8bit(s, t, step); }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) override {
    k_->nf4_dequantize(s, t, d, out);
  }

 private:
  std::unique_ptr<Kernels> k_;
};

// Tolerances as for attention above: 2e-6 of the largest gradient in fp32;
// 2e-2 with bf16 activations, where the CPU keeps attention's
// probabilities rounded to bf16 and this table keeps none.
TEST(CudaBodies, TheModelWithRowStatisticsAttentionHasTheCpuModelsGradients) {
  // GPT-2, and a Llama of four query heads over one key and value head
  // (q and k turned in place, what the plan's attention reads); packed
  // sequences too, the plan's rows masked to their documents.
  GptConfig llama = testing::small_llama(true);
  llama.block_size = 32;
  for (const GptConfig& cfg : {GptConfig{2, 4, 64, 96, 32}, llama}) {
    const int B = 2, T = 32;
    testing::CpuRig rig;
    PlanAttentionTable rows(*kernels_for(rig.device));
    const std::vector<int32_t> inputs = testing::random_tokens(B * T, cfg.vocab_size, 9),
                               targets = testing::random_tokens(B * T, cfg.vocab_size, 10);
    // Packed: documents of 5 and 27 tokens, and of 13 and 19.
    std::vector<int32_t> positions(B * T);
    for (int t = 0; t < T; ++t) {
      positions[t] = t < 5 ? t : t - 5;
      positions[T + t] = t < 13 ? t : t - 13;
    }
    for (auto [act, checkpointing, packed] :
         {std::tuple{DType::kF32, false, false}, std::tuple{DType::kF32, true, false},
          std::tuple{DType::kBF16, false, false}, std::tuple{DType::kBF16, true, false},
          std::tuple{DType::kF32, false, true}, std::tuple{DType::kBF16, true, true}}) {
      SCOPED_TRACE(::testing::Message() << (cfg.llama() ? "llama, " : "gpt2, ") << dtype_name(act)
                                        << (checkpointing ? ", checkpointing" : "") << (packed ? ", packed" : ""));
      auto rm = Gpt::create(cfg, B, T, act, checkpointing, rig.device, rows, false, nullptr, 1, packed);
      auto cm = Gpt::create(cfg, B, T, act, checkpointing, rig.device, *rig.kernels, false, nullptr, 1, packed);
      ASSERT_TRUE(rm.ok() && cm.ok());
      const GptLayout& layout = (*cm)->layout();
      std::vector<float> params(layout.num_params());
      init_gpt_params(layout, 5, params.data());
      std::vector<std::vector<float>> grads(2, std::vector<float>(params.size(), 0.0f));
      double loss[2];
      for (int m = 0; m < 2; ++m) {
        Kernels& k = m == 0 ? static_cast<Kernels&>(rows) : *rig.kernels;
        auto w = FlatWeights::create(&layout, DType::kF32, params.data(), rig.device, k);
        ASSERT_TRUE(w.ok());
        FlatGrads sink(&layout, grads[m].data());
        auto l = (m == 0 ? *rm : *cm)
                     ->forward_backward(*w, sink, inputs.data(), targets.data(), B, T, 1.0f, 0,
                                        packed ? positions.data() : nullptr);
        ASSERT_TRUE(l.ok()) << l.status();
        loss[m] = *l;
      }
      const double tol = act == DType::kF32 ? 2e-6 : 2e-2;
      EXPECT_NEAR(loss[0], loss[1], tol * std::fabs(loss[1]));
      for (const ParamSegment& t : layout.segments()) {
        const std::vector<float> got(grads[0].begin() + t.offset, grads[0].begin() + t.offset + t.numel);
        const std::vector<float> want(grads[1].begin() + t.offset, grads[1].begin() + t.offset + t.numel);
        SCOPED_TRACE(::testing::Message() << layout.tensor(t.id).name << " layer " << t.layer);
        expect_close(got, want, static_cast<float>(tol), "gradient");
      }
    }
  }
}

}  // namespace
}  // namespace zerod
