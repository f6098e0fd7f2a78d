// The embedding's launches (embedding.h). Included by the CUDA table alone.
#pragma once

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/embedding.h"

namespace zerod::cuda {

// 16 bytes a thread (a thread an element read 0.1 of HBM's bandwidth on
// an H200).
template <DType kT>
void embedding_forward_as(cudaStream_t s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int64_t N,
                          int T, int C, const int32_t* pos) {
  launch_each(s, N * (C / RowVectors<kT>::W), "embedding_forward",
              [=] __device__(int64_t i) { vec_embedding_forward_at<kT>(i, out, tokens, wte, wpe, T, C, pos); });
}

inline void embedding_forward(cudaStream_t s, DType t, void* out, const int32_t* tokens, const void* wte,
                              const void* wpe, int B, int T, int C, const int32_t* pos) {
  if (rows_in_vectors(t, C, {out, wte, wpe})) {
    return for_operands(t, [&](auto k) {
      embedding_forward_as<decltype(k)::value>(s, out, tokens, wte, wpe, int64_t(B) * T, T, C, pos);
    });
  }
  const Operands o{out, t};
  const ConstOperands te{wte, t}, pe{wpe, t};
  launch_each(s, int64_t(B) * T * C, "embedding_forward",
              [=] __device__(int64_t j) { embedding_forward_at(j, o, tokens, te, pe, T, C, pos); });
}

// A block per token's run of positions, then a thread per element of
// dwpe (packed sequences: a block per position's run of rows, pos_order
// the rows sorted by position): the CPU's order of additions, without a
// thread that walks every position.
inline void embedding_backward(cudaStream_t s, DType t, float* dwte, float* dwpe, const void* dout,
                               const int32_t* tokens, const int32_t* order, int B, int T, int C, const int32_t* pos,
                               const int32_t* pos_order) {
  const int64_t N = int64_t(B) * T;
  const ConstOperands dy{dout, t};
  launch_block_rows(s, N, "embedding_backward_tokens", [=] __device__(int64_t i, int lane, int lanes) {
    embedding_backward_run(i, lane, lanes, dwte, dy, tokens, order, N, C);
  });
  if (!dwpe) return;
  if (pos) {
    assert(pos_order);
    launch_block_rows(s, N, "embedding_backward_positions", [=] __device__(int64_t i, int lane, int lanes) {
      embedding_backward_run(i, lane, lanes, dwpe, dy, pos, pos_order, N, C);
    });
    return;
  }
  launch_each(s, int64_t(T) * C, "embedding_backward_positions",
              [=] __device__(int64_t j) { embedding_backward_position_at(j, dwpe, dy, B, T, C); });
}

}  // namespace zerod::cuda
