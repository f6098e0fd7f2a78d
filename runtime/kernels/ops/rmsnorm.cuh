// RMSNorm's launches (rmsnorm.h): a warp a row, 16 bytes a lane where rows
// are whole vectors, the forward's row held in registers where the warp
// can hold it (rows.cuh) and the residual add before it fused; its weight's
// gradient in column chunks (rows.h), as LayerNorm's. Included by the CUDA
// table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/rmsnorm.h"
#include "runtime/kernels/ops/rows.cuh"

namespace zerod::cuda {

// Row n of the forward from x (a row in registers or in memory): its
// reciprocal root, the normalized row, the root kept.
template <DType kT, int kHeld>
__device__ void held_rmsnorm_row(const HeldRow<kT, kHeld>& x, void* out, float* rstd, const void* w, int64_t n, int C,
                                 float eps, int lane) {
  const float r = rmsnorm_rstd(warp_reduce(x.squares_about(0.0f), Sum()), C, eps);
  held_rmsnorm_write(x, out, w, r);
  if (lane == 0) rstd[n] = r;
}
template <DType kT>
__device__ void rmsnorm_row(void* out, float* rstd, const void* x, const void* w, int64_t n, int C, float eps,
                            int lane) {
  const float r = rmsnorm_rstd(warp_reduce(vec_row_squares_about<kT>(x, C, 0.0f, lane, 32), Sum()), C, eps);
  vec_rmsnorm_write<kT>(out, x, w, C, r, lane, 32);
  if (lane == 0) rstd[n] = r;
}

// The forward of rows x, or, where `res` is given, of res = a + x written
// first (a lane reads a and x only where it writes res, so res may be a).
// A row the warp can hold is read once; a longer one again from what each
// lane wrote (its re-reads hit the cache).
template <DType kT, int kHeld>
void held_rmsnorm_forward_as(cudaStream_t s, void* res, void* out, float* rstd, const void* a, const void* x,
                             const void* w, int64_t N, int C, float eps) {
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, res ? "residual_rmsnorm_forward" : "rmsnorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    HeldRow<kT, kHeld> row(C, lane, 32);
    if (res) {
      row.load_sum(static_cast<char*>(res) + at, static_cast<const char*>(a) + at, static_cast<const char*>(x) + at);
    } else {
      row.load(static_cast<const char*>(x) + at);
    }
    held_rmsnorm_row(row, static_cast<char*>(out) + at, rstd, w, n, C, eps, lane);
  });
}
template <DType kT>
void rmsnorm_forward_as(cudaStream_t s, void* res, void* out, float* rstd, const void* a, const void* x, const void* w,
                        int64_t N, int C, float eps) {
  if (with_held_row<kT>(
          C, [&](auto h) { held_rmsnorm_forward_as<kT, decltype(h)::value>(s, res, out, rstd, a, x, w, N, C, eps); })) {
    return;
  }
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, res ? "residual_rmsnorm_forward" : "rmsnorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    const void* row = static_cast<const char*>(x) + at;
    if (res) {
      vec_residual_row<kT>(static_cast<char*>(res) + at, static_cast<const char*>(a) + at, row, C, lane, 32);
      row = static_cast<const char*>(res) + at;
    }
    rmsnorm_row<kT>(static_cast<char*>(out) + at, rstd, row, w, n, C, eps, lane);
  });
}

inline void rmsnorm_forward(cudaStream_t s, DType t, void* out, float* rstd, const void* inp, const void* w, int64_t N,
                            int C, float eps) {
  if (rows_in_vectors(t, C, {out, inp, w})) {
    return for_operands(
        t, [&](auto k) { rmsnorm_forward_as<decltype(k)::value>(s, nullptr, out, rstd, nullptr, inp, w, N, C, eps); });
  }
  const Operands o{out, t};
  const ConstOperands x0{inp, t}, wt{w, t};
  launch_warp_rows(s, N, "rmsnorm_forward", [=] __device__(int64_t n, int lane) {
    const ConstOperands x = x0 + n * C;
    const float r = rmsnorm_rstd(warp_reduce(row_squares_about(x, C, 0.0f, lane, 32), Sum()), C, eps);
    rmsnorm_write(o + n * C, x, wt, C, r, lane, 32);
    if (lane == 0) rstd[n] = r;
  });
}

// res = a + b, then its RMSNorm, in one pass where rows are whole vectors;
// false, nothing enqueued, where they are not.
inline bool residual_rmsnorm_forward(cudaStream_t s, DType t, void* res, void* out, float* rstd, const void* a,
                                     const void* b, const void* w, int64_t N, int C, float eps) {
  if (!rows_in_vectors(t, C, {res, out, a, b, w})) return false;
  for_operands(t, [&](auto k) { rmsnorm_forward_as<decltype(k)::value>(s, res, out, rstd, a, b, w, N, C, eps); });
  return true;
}

template <DType kT>
void rmsnorm_backward_rows_as(cudaStream_t s, void* dinp, const void* dout, const void* inp, const void* w,
                              const float* rstd, int64_t N, int C) {
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "rmsnorm_backward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    const void* x = static_cast<const char*>(inp) + at;
    const void* dy = static_cast<const char*>(dout) + at;
    const float sum = warp_reduce(vec_rmsnorm_backward_sum<kT>(dy, x, w, rstd[n], C, lane, 32), Sum());
    vec_rmsnorm_backward_write<kT>(static_cast<char*>(dinp) + at, dy, x, w, rstd[n], sum, C, lane, 32);
  });
}

// `partial`: kColumnPartials floats of scratch for the column sums.
inline void rmsnorm_backward(cudaStream_t s, DType t, float* partial, void* dinp, float* dw, const void* dout,
                             const void* inp, const void* w, const float* rstd, int64_t N, int C) {
  const Operands dx0{dinp, t};
  const ConstOperands dy0{dout, t}, x0{inp, t}, wt{w, t};
  if (rows_in_vectors(t, C, {dinp, dout, inp, w})) {
    for_operands(t, [&](auto k) { rmsnorm_backward_rows_as<decltype(k)::value>(s, dinp, dout, inp, w, rstd, N, C); });
  } else {
    launch_warp_rows(s, N, "rmsnorm_backward", [=] __device__(int64_t n, int lane) {
      const ConstOperands x = x0 + n * C, dy = dy0 + n * C;
      const float sum = warp_reduce(rmsnorm_backward_sum(dy, x, wt, rstd[n], C, lane, 32), Sum());
      rmsnorm_backward_write(dx0 + n * C, dy, x, wt, rstd[n], sum, C, lane, 32);
    });
  }
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
