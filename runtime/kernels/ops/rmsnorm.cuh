// RMSNorm's launches (rmsnorm.h): a warp a row, and its weight's gradient
// in column chunks (rows.h), as LayerNorm's. Included by the CUDA table
// alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/rmsnorm.h"

namespace zerod::cuda {

inline void rmsnorm_forward(cudaStream_t s, DType t, void* out, float* rstd, const void* inp, const void* w, int64_t N,
                            int C, float eps) {
  const Operands o{out, t};
  const ConstOperands x0{inp, t}, wt{w, t};
  launch_warp_rows(s, N, "rmsnorm_forward", [=] __device__(int64_t n, int lane) {
    const ConstOperands x = x0 + n * C;
    const float r = rmsnorm_rstd(warp_reduce(row_squares_about(x, C, 0.0f, lane, 32), Sum()), C, eps);
    rmsnorm_write(o + n * C, x, wt, C, r, lane, 32);
    if (lane == 0) rstd[n] = r;
  });
}

// `partial`: kColumnPartials floats of scratch for the column sums.
inline void rmsnorm_backward(cudaStream_t s, DType t, float* partial, void* dinp, float* dw, const void* dout,
                             const void* inp, const void* w, const float* rstd, int64_t N, int C) {
  const Operands dx0{dinp, t};
  const ConstOperands dy0{dout, t}, x0{inp, t}, wt{w, t};
  launch_warp_rows(s, N, "rmsnorm_backward", [=] __device__(int64_t n, int lane) {
    const ConstOperands x = x0 + n * C, dy = dy0 + n * C;
    const float sum = warp_reduce(rmsnorm_backward_sum(dy, x, wt, rstd[n], C, lane, 32), Sum());
    rmsnorm_backward_write(dx0 + n * C, dy, x, wt, rstd[n], sum, C, lane, 32);
  });
  if (!dw) return;
  const int64_t rows = column_chunk_rows(N, C), chunks = column_chunks(N, rows, C, "rmsnorm_backward");
  launch_each(s, chunks * C, "rmsnorm_backward_partials",
              [=] __device__(int64_t j) { rmsnorm_weight_partial_at(j, partial, dy0, x0, rstd, N, C, rows); });
  launch_warp_rows(s, C, "rmsnorm_backward_totals", [=] __device__(int64_t i, int lane) {
    const float g = warp_reduce(column_share(i, lane, 32, partial, chunks, C), Sum());
    if (lane == 0) dw[i] += g;
  });
}

}  // namespace zerod::cuda
