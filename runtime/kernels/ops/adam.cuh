// The optimizer's launches (adam.h, adam8bit.h; optim_groups.h's bodies):
// a rank's tensors in groups, a launch a group. Included by the CUDA table
// alone.
#pragma once

#include "absl/types/span.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/ops/adam.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/optim_groups.h"

namespace zerod::cuda {

// 8-bit Adam: one block of kQuantBlock threads per quantization block;
// the block's new absmax is a max (exact in any order), then each thread
// requantizes its own element. A launch takes a group of tensors
// (optim_groups.h), its blocks numbered tensor after tensor.
static __global__ void adam8bit_kernel(TensorGroup<Adam8bitTensor> g, const QuantMap* maps) {
  static_assert(kQuantBlock == 256);
  __shared__ float m_max[kQuantBlock], v_max[kQuantBlock];
  const int member = group_member(g, blockIdx.x);
  const Adam8bitTensor& t = g.t[member];
  AdamStep k = g.k[member];
  if (!resolve_grad_scale(k)) return;  // the same answer in every thread of the block
  const QuantMap& qm = maps[0];
  const QuantMap& qv = maps[1];
  const int64_t blk = blockIdx.x - g.start[member], i = blk * kQuantBlock + threadIdx.x;
  float m = 0.0f, v = 0.0f;
  if (i < t.n) adam8bit_at(i, t, k, qm, qv, m, v);
  m_max[threadIdx.x] = fabsf(m);
  v_max[threadIdx.x] = v;
  __syncthreads();
  for (int half = kQuantBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      m_max[threadIdx.x] = fmaxf(m_max[threadIdx.x], m_max[threadIdx.x + half]);
      v_max[threadIdx.x] = fmaxf(v_max[threadIdx.x], v_max[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const float m_abs = m_max[0], v_abs = v_max[0];
  if (i < t.n) {
    t.m[i] = quantize_code(qm, m * (2 * inverse_or_zero(m_abs)));
    t.v[i] = quantize_code(qv, v * (2 * inverse_or_zero(v_abs)));
  }
  if (threadIdx.x == 0) {
    t.m_absmax[blk] = m_abs;
    t.v_absmax[blk] = v_abs;
  }
}
static_assert(sizeof(TensorGroup<Adam8bitTensor>) + sizeof(QuantMap*) <= 4096, "a launch's parameters");
static_assert(sizeof(TensorGroup<AdamTensor>) + 64 <= 4096, "a launch's parameters, with launch_each's own");

inline void adam_group(cudaStream_t s, const TensorGroup<AdamTensor>& g) {
  launch_each(s, g.start[g.count], "adam", [=] __device__(int64_t i) { adam_group_at(i, g); });
}

// kGroupTensors tensors a launch: gpt2's 148 in 7.
inline void adam_tensors(cudaStream_t s, absl::Span<const AdamTensor> ts, absl::Span<const AdamStep> steps) {
  for_groups(
      ts, steps, [](const AdamTensor& t) { return t.n; }, [&](const TensorGroup<AdamTensor>& g) { adam_group(s, g); });
}
// `maps`: the signed and the unsigned dynamic maps, in device memory.
inline void adam8bit_tensors(cudaStream_t s, const QuantMap* maps, absl::Span<const Adam8bitTensor> ts,
                             absl::Span<const AdamStep> steps) {
  for_groups(
      ts, steps, [](const Adam8bitTensor& t) { return quant_blocks(t.n); },
      [&](const TensorGroup<Adam8bitTensor>& g) {
        adam8bit_kernel<<<static_cast<unsigned>(g.start[g.count]), kQuantBlock, 0, s>>>(g, maps);
        check_launch(s, "adam8bit");
      });
}

// The gradients' factor from n units' sums of squares (a few hundred):
// one thread, adding in the host's order.
inline void update_factor(cudaStream_t s, const double* sums, int n, double loss_scale, double clip, float* factor,
                          double* sumsq) {
  launch_each(s, 1, "update_factor",
              [=] __device__(int64_t) { update_factor_of_sums(sums, n, loss_scale, clip, factor, sumsq); });
}

}  // namespace zerod::cuda
