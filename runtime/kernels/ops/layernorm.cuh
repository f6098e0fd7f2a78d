// LayerNorm's launches (layernorm.h): a warp a row, and its parameters'
// gradients in column chunks (rows.h), a thread a chunk of a column.
// Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/layernorm.h"
#include "runtime/kernels/ops/rows.cuh"

namespace zerod::cuda {

// LayerNorm's rows 16 bytes a lane (layernorm.h's vec_ bodies), a warp a
// row, and its parameters' gradients W columns a thread. A row the warp
// can hold in registers (HeldRow) is read once; a longer one three times,
// the later two from cache.
template <DType kT>
__device__ void layernorm_row(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                              int64_t n, int C, int lane) {
  const float m = warp_reduce(vec_row_sum<kT>(x, C, lane, 32), Sum()) / C;
  const float r = layernorm_rstd(warp_reduce(vec_row_squares_about<kT>(x, C, m, lane, 32), Sum()), C);
  vec_layernorm_write<kT>(out, x, w, b, C, m, r, lane, 32);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}
template <DType kT, int kHeld>
__device__ void held_layernorm_row(const HeldRow<kT, kHeld>& x, void* out, float* mean, float* rstd, const void* w,
                                   const void* b, int64_t n, int C, int lane) {
  const float m = warp_reduce(x.sum(), Sum()) / C;
  const float r = layernorm_rstd(warp_reduce(x.squares_about(m), Sum()), C);
  held_layernorm_write(x, out, w, b, m, r);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}
template <DType kT, int kHeld>
void held_layernorm_forward_as(cudaStream_t s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                               const void* b, int64_t N, int C) {
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
    HeldRow<kT, kHeld> x(C, lane, 32);
    x.load(static_cast<const char*>(inp) + n * C * ob);
    held_layernorm_row(x, static_cast<char*>(out) + n * C * ob, mean, rstd, w, b, n, C, lane);
  });
}
template <DType kT>
void layernorm_forward_as(cudaStream_t s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                          const void* b, int64_t N, int C) {
  if (with_held_row<kT>(
          C, [&](auto h) { held_layernorm_forward_as<kT, decltype(h)::value>(s, out, mean, rstd, inp, w, b, N, C); })) {
    return;
  }
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
    layernorm_row<kT>(static_cast<char*>(out) + n * C * ob, mean, rstd, static_cast<const char*>(inp) + n * C * ob, w,
                      b, n, C, lane);
  });
}
// The sum's row written, then normalized: from registers where the warp
// holds the row, else from what each lane wrote (its re-reads hit the
// cache). HBM sees a and b read, res and out written. A lane reads a and
// b only where it writes res, so res may be a.
template <DType kT, int kHeld>
void held_residual_layernorm_forward_as(cudaStream_t s, void* res, void* out, float* mean, float* rstd, const void* a,
                                        const void* b, const void* w, const void* bias, int64_t N, int C) {
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "residual_layernorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    HeldRow<kT, kHeld> x(C, lane, 32);
    x.load_sum(static_cast<char*>(res) + at, static_cast<const char*>(a) + at, static_cast<const char*>(b) + at);
    held_layernorm_row(x, static_cast<char*>(out) + at, mean, rstd, w, bias, n, C, lane);
  });
}
template <DType kT>
void residual_layernorm_forward_as(cudaStream_t s, void* res, void* out, float* mean, float* rstd, const void* a,
                                   const void* b, const void* w, const void* bias, int64_t N, int C) {
  if (with_held_row<kT>(C, [&](auto h) {
        held_residual_layernorm_forward_as<kT, decltype(h)::value>(s, res, out, mean, rstd, a, b, w, bias, N, C);
      })) {
    return;
  }
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "residual_layernorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    void* x = static_cast<char*>(res) + at;
    vec_residual_row<kT>(x, static_cast<const char*>(a) + at, static_cast<const char*>(b) + at, C, lane, 32);
    layernorm_row<kT>(static_cast<char*>(out) + at, mean, rstd, x, w, bias, n, C, lane);
  });
}
template <DType kT>
void layernorm_backward_rows_as(cudaStream_t s, void* dinp, const void* dout, const void* inp, const void* w,
                                const float* mean, const float* rstd, int64_t N, int C) {
  constexpr int64_t ob = operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_backward", [=] __device__(int64_t n, int lane) {
    const void* x = static_cast<const char*>(inp) + n * C * ob;
    const void* dy = static_cast<const char*>(dout) + n * C * ob;
    LayerNormRowSums sums = vec_layernorm_backward_sums<kT>(dy, x, w, mean[n], rstd[n], C, lane, 32);
    sums.dnorm = warp_reduce(sums.dnorm, Sum());
    sums.dnorm_norm = warp_reduce(sums.dnorm_norm, Sum());
    vec_layernorm_backward_write<kT>(static_cast<char*>(dinp) + n * C * ob, dy, x, w, mean[n], rstd[n], sums, C, lane,
                                     32);
  });
}
template <DType kT>
void layernorm_params_partials_as(cudaStream_t s, float* partial, const void* dout, const void* inp, const float* mean,
                                  const float* rstd, int64_t N, int C, int64_t rows, int64_t chunks) {
  launch_each(s, chunks * (C / RowVectors<kT>::W), "layernorm_backward_partials", [=] __device__(int64_t j) {
    vec_layernorm_params_partial_at<kT>(j, partial, dout, inp, mean, rstd, N, C, rows);
  });
}
inline void layernorm_forward(cudaStream_t s, DType t, void* out, float* mean, float* rstd, const void* inp,
                              const void* w, const void* b, int64_t N, int C) {
  if (rows_in_vectors(t, C, {out, inp, w, b})) {
    return for_operands(t,
                        [&](auto k) { layernorm_forward_as<decltype(k)::value>(s, out, mean, rstd, inp, w, b, N, C); });
  }
  const Operands o{out, t};
  const ConstOperands x0{inp, t}, wt{w, t}, bt{b, t};
  launch_warp_rows(s, N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
    const ConstOperands x = x0 + n * C;
    const float m = warp_reduce(row_sum(x, C, lane, 32), Sum()) / C;
    const float r = layernorm_rstd(warp_reduce(row_squares_about(x, C, m, lane, 32), Sum()), C);
    layernorm_write(o + n * C, x, wt, bt, C, m, r, lane, 32);
    if (lane == 0) {
      mean[n] = m;
      rstd[n] = r;
    }
  });
}

// res = a + b, then its LayerNorm, in one pass where rows are whole
// vectors; false, nothing enqueued, where they are not.
inline bool residual_layernorm_forward(cudaStream_t s, DType t, void* res, void* out, float* mean, float* rstd,
                                       const void* a, const void* b, const void* w, const void* bias, int64_t N,
                                       int C) {
  if (!rows_in_vectors(t, C, {res, out, a, b, w, bias})) return false;
  for_operands(t, [&](auto k) {
    residual_layernorm_forward_as<decltype(k)::value>(s, res, out, mean, rstd, a, b, w, bias, N, C);
  });
  return true;
}

// `partial`: kColumnPartials floats of scratch for the column sums.
inline void layernorm_backward(cudaStream_t s, DType t, float* partial, void* dinp, float* dw, float* db,
                               const void* dout, const void* inp, const void* w, const float* mean, const float* rstd,
                               int64_t N, int C) {
  const Operands dx0{dinp, t};
  const ConstOperands dy0{dout, t}, x0{inp, t}, wt{w, t};
  const bool vec = rows_in_vectors(t, C, {dinp, dout, inp, w});
  if (vec) {
    for_operands(
        t, [&](auto k) { layernorm_backward_rows_as<decltype(k)::value>(s, dinp, dout, inp, w, mean, rstd, N, C); });
  } else {
    launch_warp_rows(s, N, "layernorm_backward", [=] __device__(int64_t n, int lane) {
      const ConstOperands x = x0 + n * C, dy = dy0 + n * C;
      LayerNormRowSums sums = layernorm_backward_sums(dy, x, wt, mean[n], rstd[n], C, lane, 32);
      sums.dnorm = warp_reduce(sums.dnorm, Sum());
      sums.dnorm_norm = warp_reduce(sums.dnorm_norm, Sum());
      layernorm_backward_write(dx0 + n * C, dy, x, wt, mean[n], rstd[n], sums, C, lane, 32);
    });
  }
  if (!dw) return;
  const int64_t rows = column_chunk_rows(N, 2 * C), chunks = column_chunks(N, rows, 2 * C, "layernorm_backward");
  if (vec) {
    for_operands(t, [&](auto k) {
      layernorm_params_partials_as<decltype(k)::value>(s, partial, dout, inp, mean, rstd, N, C, rows, chunks);
    });
  } else {
    launch_each(s, chunks * C, "layernorm_backward_partials", [=] __device__(int64_t j) {
      layernorm_params_partial_at(j, partial, dy0, x0, mean, rstd, N, C, rows);
    });
  }
  launch_warp_rows(s, C, "layernorm_backward_totals", [=] __device__(int64_t i, int lane) {
    const float gw = warp_reduce(column_share(i, lane, 32, partial, chunks, 2 * C), Sum());
    const float gb = warp_reduce(column_share(i, lane, 32, partial + C, chunks, 2 * C), Sum());
    if (lane == 0) {
      dw[i] += gw;
      db[i] += gb;
    }
  });
}

}  // namespace zerod::cuda
