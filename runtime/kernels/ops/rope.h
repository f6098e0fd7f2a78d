// Rotary positions, the Llama family's, in place on a row of q (NH heads),
// k and v (KV heads each) of hd: its q and k heads turned by their
// position's angles, v left as it is, where for a head's element d < hd/2
// at position p and angle theta_d(p) (model/rope.h's table)
//   q'[d] = q[d] cos - q[d + hd/2] sin,  q'[d + hd/2] = q[d + hd/2] cos + q[d] sin
// (k' likewise). Attention then reads the row as it is: each key and value
// head serves its NH / KV query heads there (attention.h). The backward
// turns q's and k's gradients back (the transpose: sin negated).
// Memory-bound, each element of q and k read and written once: (NH + KV)
// hd a row; a pair (d, d + hd/2) a thread, or on the GPU 16 bytes of
// each half a thread where hd/2 is a whole number of them, the same bits.
//
// One body for both tables: the CPU's (rope.cc) over its cores, the CUDA
// table's (rope.cuh) over its grid.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"
#include "runtime/kernels/ops/pointwise.h"

namespace zerod {
namespace cuda {

// Row n of a pass's rows is at position pos[n] of its document (packed
// sequences: [N] on the device), or n % T where pos is null.
struct RopeShape {
  int T, NH, KV, hd;
  const int32_t* pos = nullptr;
  ZD_HD int64_t position(int64_t n) const { return pos ? pos[n] : n % T; }
  ZD_HD int64_t width() const { return int64_t(NH + 2 * KV) * hd; }  // a row
  ZD_HD int64_t C() const { return int64_t(NH) * hd; }
  ZD_HD int64_t pairs() const { return int64_t(NH + KV) * (hd / 2); }  // a row's turned pairs
};
// Pair j of the [N, width] rows x (row j / pairs() at s.position(row))
// turned in place by `sign` (1 forward, -1 back); `table` is [T, hd/2, 2].
template <class X>
ZD_HD void rope_pair_at(int64_t j, X x, const float* table, const RopeShape& s, float sign) {
  const int half = s.hd / 2;
  const int64_t n = j / s.pairs(), p = j % s.pairs();
  const int i = static_cast<int>(p % half);
  const X head = x + (n * s.width() + p / half * s.hd);
  const float* cs = table + s.position(n) * s.hd;
  const float c = cs[2 * i], sn = sign * cs[2 * i + 1];
  const float lo = head[i], hi = head[i + half];
  head[i] = lo * c - hi * sn;
  head[i + half] = hi * c + lo * sn;
}

// 16 bytes of operands of type kT a thread: vector t of the rows' q and k
// halves, turned with the vector hd/2 after it. Where hd/2 is a whole
// number of vectors and x 16-byte aligned, the vectors of N rows; else
// none.
template <DType kT>
inline int64_t rope_vectors(int64_t N, const RopeShape& s, const void* x) {
  return (s.hd / 2) % Lanes16<kT>::kWidth == 0 ? vectors_for<kT>(N * s.pairs(), x, nullptr, nullptr) : 0;
}
template <DType kT>
ZD_HD void rope_vec_at(int64_t t, void* x, const float* table, const RopeShape& s, float sign) {
  using L = Lanes16<kT>;
  const int half = s.hd / 2, per_head = half / L::kWidth;
  const int64_t per_row = int64_t(s.NH + s.KV) * per_head, n = t / per_row, r = t % per_row;
  const int i0 = static_cast<int>(r % per_head) * L::kWidth;
  Bytes16* lo = static_cast<Bytes16*>(x) + (n * s.width() + r / per_head * s.hd + i0) / L::kWidth;
  Bytes16* hi = lo + per_head;
  const float* cs = table + s.position(n) * s.hd + 2 * i0;
  const Bytes16 a = *lo, b = *hi;
  Bytes16 ta, tb;
  for (int k = 0; k < L::kWidth; ++k) {
    const float c = cs[2 * k], sn = sign * cs[2 * k + 1], l = L::get(a, k), h = L::get(b, k);
    L::set(ta, k, l * c - h * sn);
    L::set(tb, k, h * c + l * sn);
  }
  *lo = ta;
  *hi = tb;
}

}  // namespace cuda

namespace cpu {

// qkv is [N, (NH + 2 KV) hd] (N = B T rows, at s.position(n)): q and k
// turned in place by the rotary `table` [T, hd/2, 2] (model/rope.h), or
// their gradients turned back.
using cuda::RopeShape;
void rope_forward(float* qkv, const float* table, const RopeShape& s, int64_t N);
void rope_backward(float* dqkv, const float* table, const RopeShape& s, int64_t N);

}  // namespace cpu
}  // namespace zerod
