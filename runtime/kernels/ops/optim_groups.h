// Per-element bodies of the optimizer kernels, with adam.h's AdamStep math
// operation for operation (fmaf where it writes fma, one rounding each; the
// .cu files build with --fmad=false, so nothing else is fused), and
// 8-bit states coded by the dynamic maps of quant_map.h: the GPU's
// updates are the CPU's, bit for bit.
#pragma once

#include "absl/types/span.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/hd.h"

namespace zerod::cuda {

ZD_HD void adam_math(const AdamStep& k, float g, float& p, float& m, float& v) {
  g = fmaf(k.l2, p, g * k.grad_scale);
  m = fmaf(k.beta1, m, k.one_minus_beta1 * g);
  v = fmaf(k.beta2, v, (k.one_minus_beta2 * g) * g);
  const float denom = fmaf(sqrtf(v), k.inv_sqrt_bc2, k.eps);
  p = fmaf(k.neg_step_size, m / denom, p * k.shrink);
}

ZD_HD void adam_at(int64_t i, const AdamTensor& t, const AdamStep& k) {
  float p = t.param[i], m = t.m[i], v = t.v[i];
  adam_math(k, load_f32(t.grad, t.grad_type, i), p, m, v);
  t.param[i] = p;
  t.m[i] = m;
  t.v[i] = v;
  if (t.param16) store_f32(t.param16, t.param16_type, i, p);
}

// A map's code as a value: the code table itself (what the CPU's
// arithmetic dequantization computes, and its byte-table path reads).
ZD_HD float dequantize_code(const QuantMap& q, uint8_t code, float absmax) { return q.code[code] * absmax; }

// The code nearest to x2 / 2, x2 being value * (2 / absmax): magnitude t
// is how many of the map's edges lie below |x2| / 2 (QuantMap::thr), taken
// as 2 * thr[k] < |x2|, which is exact; a negative value takes the code
// mirrored about zero, clamped at code 0.
ZD_HD uint8_t quantize_code(const QuantMap& q, float x2) {
  const float s = fabsf(x2);
  int32_t lo = 0, hi = q.num_mag - 1;  // t in [lo, hi]
  while (lo < hi) {
    const int32_t mid = (lo + hi) / 2;
    if (2 * q.thr[mid] < s) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (!q.is_signed || !(f32_bits(x2) >> 31)) return static_cast<uint8_t>(q.zero + lo);
  const int32_t c = q.zero - lo;
  return static_cast<uint8_t>(c > 0 ? c : 0);
}

ZD_HD float inverse_or_zero(float absmax) { return absmax > 0 ? 1.0f / absmax : 0.0f; }

// Element i of an 8-bit tensor: dequantizes its states with the block's
// absmax, updates the parameter (and its 16-bit copy) and returns the new
// m and v in fp32; the block's new absmax then requantizes them.
ZD_HD void adam8bit_at(int64_t i, const Adam8bitTensor& t, const AdamStep& k, const QuantMap& qm, const QuantMap& qv,
                       float& m, float& v) {
  const int64_t blk = i / kQuantBlock;
  m = dequantize_code(qm, t.m[i], t.m_absmax[blk]);
  v = dequantize_code(qv, t.v[i], t.v_absmax[blk]);
  float p = t.param[i];
  adam_math(k, load_f32(t.grad, t.grad_type, i), p, m, v);
  t.param[i] = p;
  if (t.param16) store_f32(t.param16, t.param16_type, i, p);
}

// Up to kGroupTensors tensors updated in one launch, carried by value as
// the kernel's parameter (not in device memory; under the 4 KB a launch
// takes, adam.cuh asserts): the launch's elements (or 8-bit blocks)
// numbered tensor after tensor, tensor j's from start[j].
inline constexpr int kGroupTensors = 24;
template <class Tensor>
struct TensorGroup {
  int count = 0;
  int64_t start[kGroupTensors + 1] = {};  // start[count]: the launch's total
  Tensor t[kGroupTensors];
  AdamStep k[kGroupTensors];
};

// The tensors in groups of up to kGroupTensors non-empty ones, each group
// handed to launch with its starts counted in units(tensor).
template <class Tensor, class Units, class Launch>
void for_groups(absl::Span<const Tensor> ts, absl::Span<const AdamStep> steps, Units units, Launch launch) {
  TensorGroup<Tensor> g{};
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t u = units(ts[i]);
    if (u <= 0) continue;
    g.t[g.count] = ts[i];
    g.k[g.count] = steps[i];
    g.start[g.count + 1] = g.start[g.count] + u;
    if (++g.count == kGroupTensors) {
      launch(g);
      g = {};
    }
  }
  if (g.count > 0) launch(g);
}

ZD_HD void adam_group_at(int64_t i, const TensorGroup<AdamTensor>& g) {
  const int j = group_member(g, i);
  AdamStep k = g.k[j];
  if (resolve_grad_scale(k)) adam_at(i - g.start[j], g.t[j], k);
}

}  // namespace zerod::cuda
