// Attention's launches where cuDNN's fused attention does not run
// (attention.h): attention_plan.h's products through the table's cuBLAS,
// the row work a warp a row; and the document starts cuDNN's packed graphs
// read. Included by the CUDA table alone.
#pragma once

#include <functional>

#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/attention.h"
#include "runtime/kernels/ops/attention_plan.h"
#include "runtime/kernels/ops/pointwise.cuh"

namespace zerod::cuda {

// Attention's executor (attention_plan.h): the table's cuBLAS gemm, and
// one warp per row of scores. (At namespace scope: nvcc allows no
// extended lambda in a class's private parts.)
struct AttentionExec {
  std::function<void(const ColMajorGemm&)> gemm;
  cudaStream_t s;

  void softmax_rows(float* S, float* lse, int T, int64_t rows, int64_t lse_stride, const int32_t* pos) {
    launch_warp_rows(s, rows, "attention_softmax", [=] __device__(int64_t r, int lane) {
      float* row = S + r * T;
      const int64_t t = r % T, lo = first_key(pos, t);
      const float mx = warp_reduce(softmax_row_max(row, lo, t, lane, 32), Max());
      const float sum = warp_reduce(softmax_row_sum(row, lo, t, mx, lane, 32), Sum());
      softmax_row_write(row, lo, t, T, mx, 1.0f / sum, lane, 32);
      if (lane == 0) lse[r / T * lse_stride + t] = mx + logf(sum);
    });
  }
  void backward_rows(float* P, float* dP, const float* lse, int T, int64_t rows, int64_t lse_stride,
                     const int32_t* pos) {
    launch_warp_rows(s, rows, "attention_backward_rows", [=] __device__(int64_t r, int lane) {
      const int64_t t = r % T, lo = first_key(pos, t);
      const float l = lse[r / T * lse_stride + t];
      const float D = warp_reduce(probabilities_row(P + r * T, dP + r * T, lo, t, T, l, lane, 32), Sum());
      softmax_backward_row(P + r * T, dP + r * T, lo, t, T, D, lane, 32);
    });
  }
};

// Where attention's widened operands go in its scratch, after the plan's
// own (kernel_memory.cc sizes it): qkv, then the output (or its gradient),
// then qkv's gradient, each [B, T, width] fp32 (sized for KV = NH, the
// widest).
struct AttentionIo {
  int64_t N, W;
  float *qkv, *y, *dqkv;
};
// Packed sequences: each token's document's first row in its sequence
// (first_key), B sequences of T, each `stride` ints apart in `starts`: the
// int32 rows cuDNN's packed graphs read (sdpa_graph.h).
inline void document_starts(cudaStream_t s, int32_t* starts, const int32_t* pos, int B, int T, int64_t stride) {
  launch_each(s, int64_t(B) * T, "attention_document_starts", [=] __device__(int64_t i) {
    const int64_t b = i / T, t = i % T;
    starts[b * stride + t] = static_cast<int32_t>(first_key(pos + b * T, t));
  });
}

inline AttentionIo attention_io(float* scratch, int B, int T, int C, int NH, int KV) {
  const int64_t N = int64_t(B) * T, W = C + 2 * int64_t(KV) * (C / NH);
  float* io = scratch + attention_scratch_floats(T, NH);
  return {N, W, io, io + N * W, io + N * (W + C)};
}
// src as fp32: itself for fp32 operands, else widened into `to`.
inline const float* widened(cudaStream_t s, DType t, const void* src, float* to, int64_t n) {
  if (t == DType::kF32) return static_cast<const float*>(src);
  convert_to_f32(s, t, src, to, n);
  return to;
}
// The fp32 result `from` into the operands at `to` (nothing for fp32,
// computed in place).
inline void narrowed(cudaStream_t s, DType t, const float* from, void* to, int64_t n) {
  if (t != DType::kF32) convert_from_f32(s, t, from, to, n);
}

using AttentionGemm = std::function<void(const ColMajorGemm&)>;

inline void attention_forward(cudaStream_t s, DType t, const AttentionGemm& gemm, void* out, float* lse, float* scratch,
                              const void* qkv, int B, int T, int C, int NH, int KV, const int32_t* pos) {
  const AttentionIo io = attention_io(scratch, B, T, C, NH, KV);
  const float* q = widened(s, t, qkv, io.qkv, io.N * io.W);
  float* y = t == DType::kF32 ? static_cast<float*>(out) : io.y;
  AttentionExec x{gemm, s};
  attention_forward_plan(x, y, lse, scratch, q, B, T, C, NH, KV, attention_chunk_heads(T, NH), pos);
  narrowed(s, t, y, out, io.N * C);
}

// Its operands are the model's own type: nothing is rounded.
inline void attention_backward(cudaStream_t s, DType t, const AttentionGemm& gemm, void* dqkv, const void* dout,
                               const void* qkv, const float* lse, float* scratch, int B, int T, int C, int NH, int KV,
                               const int32_t* pos) {
  const AttentionIo io = attention_io(scratch, B, T, C, NH, KV);
  const float* q = widened(s, t, qkv, io.qkv, io.N * io.W);
  const float* dy = widened(s, t, dout, io.y, io.N * C);
  float* dq = t == DType::kF32 ? static_cast<float*>(dqkv) : io.dqkv;
  AttentionExec x{gemm, s};
  attention_backward_plan(x, dq, dy, q, lse, scratch, B, T, C, NH, KV, attention_chunk_heads(T, NH), pos);
  narrowed(s, t, dq, dqkv, io.N * io.W);
}

}  // namespace zerod::cuda
