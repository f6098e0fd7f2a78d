// Rotary positions, the Llama family's: a row of q (NH heads), k and v
// (KV heads each) of hd, its q and k heads turned by their position's
// angles, v as it is, where for a head's element d < hd/2 at position p
// and angle theta_d(p) (model/rope.h's table)
//   q'[d] = q[d] cos - q[d + hd/2] sin,  q'[d + hd/2] = q[d + hd/2] cos + q[d] sin
// (k' likewise). Attention takes the row as it is: each key and value head
// serves its NH / KV query heads there (attention.h). The backward turns
// q's and k's gradients back (the transpose: sin negated), v's as it is.
// Memory-bound, an element a thread: it reads and writes (NH + 2 KV) hd a
// row.
//
// One body for both tables: the CPU's (rope.cc) over its cores, the CUDA
// table's (rope.cuh) over its grid.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cuda {

struct RopeShape {
  int T, NH, KV, hd;
  ZD_HD int64_t width() const { return int64_t(NH + 2 * KV) * hd; }  // a row
  ZD_HD int64_t C() const { return int64_t(NH) * hd; }
};
// Element d of a head x turned by angles `cs` (cos, sin pairs): d < hd/2
// turns with d + hd/2; sign -1 turns back (the transpose, for backward).
template <class X>
ZD_HD float rope_turn(X x, const float* cs, int d, int hd, float sign) {
  const int half = hd / 2, i = d < half ? d : d - half;
  const float c = cs[2 * i], s = sign * cs[2 * i + 1];
  return d < half ? x[d] * c - x[d + half] * s : x[d] * c + x[d - half] * s;
}
// Element j of [N, width] out from in: q and k turned by `sign` (1
// forward, -1 back), v copied; `table` is [T, hd/2, 2].
template <class O, class X>
ZD_HD void rope_at(int64_t j, O out, X in, const float* table, const RopeShape& s, float sign) {
  const int64_t n = j / s.width(), c = j % s.width();
  if (c >= s.C() + int64_t(s.KV) * s.hd) {
    out[j] = in[j];
    return;
  }
  const int d = static_cast<int>(c % s.hd);
  out[j] = rope_turn(in + (j - d), table + (n % s.T) * s.hd, d, s.hd, sign);
}

}  // namespace cuda

namespace cpu {

// qkv and out are [N, (NH + 2 KV) hd] (N = B T rows, position n % T),
// q and k turned by the rotary `table` [T, hd/2, 2] (model/rope.h).
// Backward: dqkv overwritten from dout, q and k turned back.
using cuda::RopeShape;
void rope_forward(float* out, const float* qkv, const float* table, const RopeShape& s, int64_t N);
void rope_backward(float* dqkv, const float* dout, const float* table, const RopeShape& s, int64_t N);

}  // namespace cpu
}  // namespace zerod
