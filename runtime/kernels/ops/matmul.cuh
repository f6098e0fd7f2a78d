// A layer's product on the GPU (matmul.h): cuBLASLt on the table's
// operands (cuda/lt_gemm.h), the bias and the GELU as its epilogues where
// it has them. Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/lt_gemm.h"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/matmul.h"

namespace zerod::cuda {

inline void matmul_forward(cudaStream_t s, DType t, LtGemm& lt, void* out, const void* inp, const void* w,
                           const void* bias, int64_t N, int C, int OC) {
  lt.run(s, matmul_forward_gemm(out, inp, w, bias, N, C, OC), t, t);
}

// 16-bit operands: the GELU as the product's epilogue (the product writes
// pre and out), where cuBLASLt has one for the shape; false, nothing
// enqueued, else and for fp32 operands, whose job keeps the GELU of
// pointwise.h (the CPU's formula to fp32's rounding: the epilogue
// evaluates it its own way, which only 16-bit tolerances cover).
inline bool matmul_gelu_forward(cudaStream_t s, DType t, LtGemm& lt, void* out, void* pre, const void* inp,
                                const void* w, const void* bias, int64_t N, int C, int OC) {
  return t != DType::kF32 && lt.try_run(s, matmul_gelu_forward_gemm(out, pre, inp, w, bias, N, C, OC), t, t);
}

template <DType kT>
void bias_partials_as(cudaStream_t s, float* partial, const void* dout, int64_t N, int OC, int64_t rows,
                      int64_t chunks) {
  launch_each(s, chunks * (OC / RowVectors<kT>::W), "bias_backward_partials",
              [=] __device__(int64_t j) { vec_bias_partial_at<kT>(j, partial, dout, N, OC, rows); });
}

// The bias gradient is a column sum of ours, not cuBLASLt's BGRADB or
// DGELU_BGRAD epilogue: those write the gradient in the product's output
// type, where ours adds it to the fp32 one (micro-batches accumulate) in a
// fixed order. `partial`: kColumnPartials floats of scratch.
inline void matmul_backward(cudaStream_t s, DType t, LtGemm& lt, float* partial, void* dinp, float* dw, float* dbias,
                            const void* dout, const void* inp, const void* w, int64_t N, int C, int OC) {
  if (dinp) lt.run(s, matmul_dinp_gemm(dinp, dout, w, N, C, OC), t, t);
  if (dw) lt.run(s, matmul_dw_gemm(dw, dout, inp, N, C, OC), t, DType::kF32);
  if (!dbias) return;
  const int64_t rows = column_chunk_rows(N, OC), chunks = column_chunks(N, rows, OC, "bias_backward");
  const ConstOperands dy{dout, t};
  if (rows_in_vectors(t, OC, {dout})) {
    for_operands(t, [&](auto k) { bias_partials_as<decltype(k)::value>(s, partial, dout, N, OC, rows, chunks); });
  } else {
    launch_each(s, chunks * OC, "bias_backward_partials",
                [=] __device__(int64_t j) { bias_partial_at(j, partial, dy, N, OC, rows); });
  }
  launch_warp_rows(s, OC, "bias_backward_totals", [=] __device__(int64_t o, int lane) {
    const float g = warp_reduce(column_share(o, lane, 32, partial, chunks, OC), Sum());
    if (lane == 0) dbias[o] += g;
  });
}

// The input gradient of a product whose input was gelu(pre), through the
// GELU, as the product's epilogue, then dw and dbias; false, nothing
// enqueued, where matmul_gelu_forward would not fuse.
inline bool matmul_backward_gelu(cudaStream_t s, DType t, LtGemm& lt, float* partial, void* dpre, float* dw,
                                 float* dbias, const void* dout, const void* pre, const void* inp, const void* w,
                                 int64_t N, int C, int OC) {
  if (t == DType::kF32 || !lt.try_run(s, matmul_dpre_gelu_gemm(dpre, pre, dout, w, N, C, OC), t, t)) return false;
  matmul_backward(s, t, lt, partial, nullptr, dw, dbias, dout, inp, w, N, C, OC);
  return true;
}

// LoRA's products (Kernels::lora_*) as single products on the base
// product's columns in place, the scale and the sum in cuBLASLt's alpha
// and beta: no copy of dy's columns, no scratch written and added.
inline void lora_down(cudaStream_t s, DType t, LtGemm& lt, void* u, const void* x, const void* a, int64_t N, int in,
                      int r, float scale) {
  lt.run(s, lora_down_gemm(u, x, a, N, in, r, scale), t, t);
}
inline void lora_up(cudaStream_t s, DType t, LtGemm& lt, void* y, int64_t ld, int64_t c0, const void* u,
                    const void* b, int64_t N, int r, int out) {
  lt.run(s, lora_up_gemm(y, ld, c0, dtype_size(t), u, b, N, r, out), t, t);
}
inline void lora_up_backward(cudaStream_t s, DType t, LtGemm& lt, void* du, float* db, const void* dy, int64_t ld,
                             int64_t c0, const void* u, const void* b, int64_t N, int r, int out, float scale) {
  lt.run(s, lora_du_gemm(du, dy, ld, c0, dtype_size(t), b, N, r, out, scale), t, t);
  lt.run(s, lora_db_gemm(db, dy, ld, c0, dtype_size(t), u, N, r, out), t, DType::kF32);
}
inline void lora_down_backward(cudaStream_t s, DType t, LtGemm& lt, void* dx, const void* du, const void* a,
                               int64_t N, int in, int r) {
  lt.run(s, lora_dx_gemm(dx, du, a, N, in, r), t, t);
}

}  // namespace zerod::cuda
