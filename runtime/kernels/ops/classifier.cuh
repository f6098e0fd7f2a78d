// The LM head's launches (classifier.h): each chunk's logits as operands,
// rows 128-byte aligned (kernel_memory.h's logits_stride); one block a row
// reads them once (kept in shared memory and registers) for the loss and
// its softmax statistics in fp32 and writes the gradient in their place;
// then the two products. Each product runs as its vocabulary's whole
// 16-byte vectors and the rest (gemm_args.h's vocab_head and vocab_tail).
// Included by the CUDA table alone.
#pragma once

#include <algorithm>

#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/lt_gemm.h"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/classifier.h"

namespace zerod::cuda {

// A row of logits on a block: its loss, and its gradient in its place.
// `copy`: shared memory for the row's whole vectors past the kHeld a lane
// keeps in registers, or null (the row is read twice).
template <DType kT, int kHeld>
__device__ void softmax_cross_entropy_row(int64_t r, int lane, int lanes, void* copy, void* logits, int64_t ld,
                                          double* losses, const int32_t* targets, int V, float dloss) {
  void* z = static_cast<char*>(logits) + r * ld * operand_bytes(kT);
  const int target = targets[r];
  assert(target < V);
  if (target < 0) {  // left out by a loss mask: no loss, no gradient (a row a block: all its lanes return here)
    if (lane == 0) losses[r] = 0.0;
    if (dloss != 0.0f)
      for (int i = lane; i < V; i += lanes) store_f32(z, kT, i, 0.0f);
    return;
  }
  const float z_target = load_f32(z, kT, target);  // read before any lane overwrites it
  HeldVectors<kHeld> held;
  const SoftmaxPart part = vec_logits_row_part<kT>(z, V, lane, lanes, held, copy);
  const float M = block_reduce(part.max, Max());
  const float S = block_reduce(softmax_part_sum(part, M), Sum());
  if (lane == 0) losses[r] = softmax_loss(z_target, M, S);
  if (dloss != 0.0f) vec_softmax_grad_write<kT>(z, held, copy, V, target, M, S, dloss, lane, lanes);
}
// Vectors a lane of a row's block keeps in registers where the row is
// past two blocks' shared memory: 64 of the 128 registers a lane has with
// one block of kRowSharedLanes an SM, so that a row of 128 KB in registers
// and the rest in shared memory is read once (bf16 rows up to 181,000
// logits on an H100 or H200, 149,000 on an A100: Llama 3's 128,256 and
// Qwen2's 151,936 on the first, Llama 3's on the second).
inline constexpr int kSoftmaxHeldVectors = 16;
// A row whose whole vectors fit two blocks' share of the SM's shared
// memory (gpt2's 50257 bf16 logits take 98 KB, within an H100's 112 KB;
// an A100's 80 KB sends them to registers) is read once, into it; one
// that fits one block's with kSoftmaxHeldVectors a lane in registers, once,
// into both; a longer one (an fp32 job's), or one whose gradient is not
// wanted, twice from global memory, by 256 lanes.
template <DType kT>
void softmax_cross_entropy_as(cudaStream_t s, void* logits, int64_t ld, double* losses, const int32_t* targets,
                              int64_t rows, int V, float dloss, RowSharedLimits limits) {
  const int64_t shared = softmax_copy_bytes<kT>(V);
  const int64_t past_held = softmax_copy_bytes<kT>(V, int64_t{kSoftmaxHeldVectors} * kRowSharedLanes);
  if (dloss != 0.0f && shared <= limits.two_an_sm) {
    launch_block_rows_shared<2>(
        s, rows, shared, "softmax_cross_entropy", [=] __device__(int64_t r, int lane, int lanes, void* copy) {
          softmax_cross_entropy_row<kT, 0>(r, lane, lanes, copy, logits, ld, losses, targets, V, dloss);
        });
    return;
  }
  if (dloss != 0.0f && past_held <= limits.one_an_sm) {
    launch_block_rows_shared<1>(s, rows, past_held, "softmax_cross_entropy",
                                [=] __device__(int64_t r, int lane, int lanes, void* copy) {
                                  softmax_cross_entropy_row<kT, kSoftmaxHeldVectors>(r, lane, lanes, copy, logits, ld,
                                                                                     losses, targets, V, dloss);
                                });
    return;
  }
  launch_block_rows(s, rows, "softmax_cross_entropy", [=] __device__(int64_t r, int lane, int lanes) {
    softmax_cross_entropy_row<kT, 0>(r, lane, lanes, nullptr, logits, ld, losses, targets, V, dloss);
  });
}

// fp32 logits (what a caller reads), rows V apart.
inline void classifier_logits(cudaStream_t s, DType t, LtGemm& lt, float* logits, const void* inp, int64_t inp_stride,
                              const void* wte, int64_t rows, int C, int V) {
  for (const VocabSlice v : {vocab_head(V), vocab_tail(V)}) {
    lt.run(s, logits_gemm(logits, V, 4, inp, inp_stride, wte, dtype_size(t), rows, C, v), t, DType::kF32);
  }
}

// The logits are of the job's type already: ClassifierArgs::act has
// nothing to round here. `ld`: the logits' row stride; `limits`: the
// bytes of shared memory a row may take (launch.cuh's row_shared_limits).
inline void classifier_forward_backward(cudaStream_t s, DType t, LtGemm& lt, const cpu::ClassifierArgs& a, int64_t ld,
                                        RowSharedLimits limits) {
  const int C = a.C, V = a.V;
  const int64_t ob = dtype_size(t);
  const VocabSlice slices[] = {vocab_head(V), vocab_tail(V)};
  for (int64_t r0 = 0; r0 < a.N; r0 += a.chunk_rows) {
    const int64_t rows = std::min(a.chunk_rows, a.N - r0);
    const void* inp = static_cast<const char*>(a.inp) + r0 * C * ob;
    for (const VocabSlice v : slices) lt.run(s, logits_gemm(a.logits, ld, ob, inp, C, a.wte, ob, rows, C, v), t, t);
    for_operands(t, [&](auto k) {
      softmax_cross_entropy_as<decltype(k)::value>(s, a.logits, ld, a.losses + r0, a.targets + r0, rows, V, a.dloss,
                                                   limits);
    });
    if (!a.dinp) continue;
    void* dinp = static_cast<char*>(a.dinp) + r0 * C * ob;
    for (const VocabSlice v : slices) {
      lt.run(s, head_dinp_gemm(dinp, a.logits, ld, a.wte, ob, rows, C, v), t, t);
      if (a.dwte) lt.run(s, head_dwte_gemm(a.dwte, a.logits, ld, inp, ob, rows, C, v), t, DType::kF32);
    }
  }
}

}  // namespace zerod::cuda
