// The LM head, its weights the token embedding wte [V, C], with the
// softmax and cross-entropy fused:
//   logits z = x @ wte^T; loss = -log softmax(z)[target] = log sum exp(z - M) - (z[target] - M)
//   dz = (softmax(z) - onehot(target)) dloss; dx = dz @ wte; dwte += dz^T @ x
// in chunks of rows, so that the [N, V] logits never exist whole. The two
// products are bound by the tensor cores (V = 50257 to 152064 columns);
// the softmax reads a row of logits once (or twice where it does not fit
// shared memory and registers) and writes its gradient in its place. A
// row whose target is -1 (left out by a loss mask) has loss 0 and
// gradient 0.
//
// The CPU's (classifier.cc, its sums in double) is the reference; the
// CUDA table's (classifier.cuh) runs a row of logits on a block with the
// bodies below, in fp32 with the row's statistics gathered online.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/rows.h"

namespace zerod {
namespace cpu {

// Fused softmax + cross-entropy over `rows` rows of V logits: writes each
// row's loss (-log p[target]) to losses and, when dloss != 0, replaces the
// logits with their gradient (softmax - onehot) * dloss. A row whose target
// is -1 (left out by a loss mask) has loss 0 and a zero gradient.
void softmax_cross_entropy(float* logits, double* losses, const int32_t* targets, int64_t rows, int V, float dloss);

// The LM head, whose weights are the token embedding wte [V, C]:
// logits[r, v] = inp[r * inp_stride + :] . wte[v, :] for `rows` rows.
void classifier_logits(float* logits, const float* inp, int64_t inp_stride, const float* wte, int64_t rows, int C,
                       int V);

// The head's forward and backward fused, `chunk_rows` rows at a time so the
// full [N, V] logits never exist: each chunk's logits (rounded to `act`),
// its softmax cross-entropy (losses[r]), then dinp = dlogits @ wte
// (overwritten) and dwte += dlogits^T @ inp, with dlogits = (softmax -
// onehot) * dloss.
// The operands (`void*`) are of the kernel table's operand type (fp32 for
// these, the CPU's); logits rows are KernelMemory::logits_stride(V) apart.
struct ClassifierArgs {
  const void* inp;         // [N, C]
  const void* wte;         // [V, C]
  const int32_t* targets;  // [N]
  int64_t N;
  int C, V;
  float dloss;
  // The CPU rounds its fp32 logits to `act`; a table whose operands are of
  // that type has nothing to round.
  DType act;
  void* logits;  // chunk_rows rows of logits scratch
  int64_t chunk_rows;
  double* losses;  // [N]
  void* dinp;      // [N, C]; null: the losses alone (an evaluation), no gradient
  float* dwte;     // [V, C]; null: wte is frozen
};
void classifier_forward_backward(const ClassifierArgs& a);

}  // namespace cpu

namespace cuda {

// One row z of V logits (operands) in fp32 registers: each lane's largest
// value and sum of exp(z - that) in one pass over its columns (online, as
// FlashAttention keeps its statistics), combined across the row as the
// row's max M and sum S of exp(z - M); the loss -log p[target] from
// z[target] read before any lane writes; then the logits replaced by
// (softmax - onehot) * dloss.
struct SoftmaxPart {
  float max, sum;
};
// A logit of -inf (an fp16 overflow) adds nothing, even to a lane that
// has seen only such.
ZD_HD void softmax_add(SoftmaxPart& p, float x) {
  if (x > p.max) {
    p.sum = p.sum * expf(p.max - x) + 1.0f;
    p.max = x;
  } else if (p.max != -INFINITY) {
    p.sum += expf(x - p.max);
  }
}
// A lane's part of S once the row's max M is known (0 for a lane without
// columns).
ZD_HD float softmax_part_sum(SoftmaxPart p, float M) { return p.sum == 0.0f ? 0.0f : p.sum * expf(p.max - M); }
ZD_HD double softmax_loss(float z_target, float M, float S) { return static_cast<double>(logf(S) - (z_target - M)); }
// Lanes read and write a row z of operands of type kT 16 bytes at a time
// (z 16-byte aligned): the row's whole vectors (lane l taking vectors l,
// l + lanes, ...), then its last V mod W elements one a lane. A lane's
// first kHeld vectors stay in its registers (`held`) between the passes;
// the first pass loads them all, and then four of the rest at a time,
// before it adds any (16-byte loads in flight a lane) and, where `copy` is
// not null (the block's shared memory), keeps each of the rest there,
// vector i at i - kHeld lanes; the second pass reads them back from the
// registers and the copy (or, without one, from z again) and writes the
// gradient into z: with the row in registers and shared memory, HBM sees
// it read once. Each lane reads back only what it stored.
template <int kHeld>
struct HeldVectors {
  Bytes16 v[kHeld > 0 ? kHeld : 1];
};
template <DType kT, int kHeld = 0>
ZD_HD SoftmaxPart vec_logits_row_part(const void* z, int V, int lane, int lanes, HeldVectors<kHeld>& held, void* copy) {
  using R = RowVectors<kT>;
  constexpr int kBatch = 4;
  SoftmaxPart p{-INFINITY, 0.0f};
  const int vectors = V / R::W;
  const Bytes16* zv = static_cast<const Bytes16*>(z);
  ZD_UNROLL
  for (int j = 0; j < kHeld; ++j) {
    const int i = lane + j * lanes;
    if (i < vectors) held.v[j] = zv[i];
  }
  ZD_UNROLL
  for (int j = 0; j < kHeld; ++j) {
    if (lane + j * lanes >= vectors) break;
    for (int k = 0; k < R::W; ++k) softmax_add(p, R::L::get(held.v[j], k));
  }
  const int base = kHeld * lanes;  // the copy's first vector
  for (int i0 = base + lane; i0 < vectors; i0 += kBatch * lanes) {
    Bytes16 b[kBatch];
    for (int a = 0; a < kBatch; ++a) {
      const int i = i0 + a * lanes;
      if (i < vectors) b[a] = zv[i];
    }
    for (int a = 0; a < kBatch; ++a) {
      const int i = i0 + a * lanes;
      if (i >= vectors) break;
      if (copy) static_cast<Bytes16*>(copy)[i - base] = b[a];
      for (int k = 0; k < R::W; ++k) softmax_add(p, R::L::get(b[a], k));
    }
  }
  for (int i = vectors * R::W + lane; i < V; i += lanes) softmax_add(p, load_f32(z, kT, i));
  return p;
}
template <DType kT, int kHeld = 0>
ZD_HD void vec_softmax_grad_write(void* z, const HeldVectors<kHeld>& held, const void* copy, int V, int target, float M,
                                  float S, float dloss, int lane, int lanes) {
  using R = RowVectors<kT>;
  const float inv = 1.0f / S;
  const int vectors = V / R::W;
  auto write = [&](int i, float(&v)[R::W]) {
    for (int k = 0; k < R::W; ++k) {
      const int col = i * R::W + k;
      v[k] = (expf(v[k] - M) * inv - (col == target ? 1.0f : 0.0f)) * dloss;
    }
    R::store(z, i, v);
  };
  float v[R::W];
  ZD_UNROLL
  for (int j = 0; j < kHeld; ++j) {
    const int i = lane + j * lanes;
    if (i >= vectors) break;
    for (int k = 0; k < R::W; ++k) v[k] = R::L::get(held.v[j], k);
    write(i, v);
  }
  const int base = kHeld * lanes;
  const void* from = copy ? copy : z;  // vector i at i - shift
  const int shift = copy ? base : 0;
  for (int i = base + lane; i < vectors; i += lanes) {
    R::load(from, i - shift, v);
    write(i, v);
  }
  for (int i = vectors * R::W + lane; i < V; i += lanes) {
    const float p = expf(load_f32(z, kT, i) - M) * inv;
    store_f32(z, kT, i, (p - (i == target ? 1.0f : 0.0f)) * dloss);
  }
}
// Bytes of shared memory a row's whole vectors take (what `copy` holds)
// past the `held` vectors its lanes keep in registers.
template <DType kT>
ZD_HD int64_t softmax_copy_bytes(int V, int64_t held = 0) {
  const int64_t rest = int64_t(V / RowVectors<kT>::W) - held;
  return rest > 0 ? rest * 16 : 0;
}

}  // namespace cuda
}  // namespace zerod
