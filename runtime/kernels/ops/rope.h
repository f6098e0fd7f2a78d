// Rotary positions, the Llama family's, in place on a row of q (NH heads),
// k and v (KV heads each) of hd: its q and k heads turned by their
// position's angles, v left as it is, where for a head's element d < hd/2
// at position p and angle theta_d(p) (model/rope.h's table)
//   q'[d] = q[d] cos - q[d + hd/2] sin,  q'[d + hd/2] = q[d + hd/2] cos + q[d] sin
// (k' likewise). Attention then reads the row as it is: each key and value
// head serves its NH / KV query heads there (attention.h). The backward
// turns q's and k's gradients back (the transpose: sin negated).
// Memory-bound, a pair (d, d + hd/2) a thread, each read and written once:
// (NH + KV) hd elements a row.
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
  ZD_HD int64_t pairs() const { return int64_t(NH + KV) * (hd / 2); }  // a row's turned pairs
};
// Pair j of the [N, width] rows x (row j / pairs(), position its index % T)
// turned in place by `sign` (1 forward, -1 back); `table` is [T, hd/2, 2].
template <class X>
ZD_HD void rope_pair_at(int64_t j, X x, const float* table, const RopeShape& s, float sign) {
  const int half = s.hd / 2;
  const int64_t n = j / s.pairs(), p = j % s.pairs();
  const int i = static_cast<int>(p % half);
  const X head = x + (n * s.width() + p / half * s.hd);
  const float* cs = table + (n % s.T) * s.hd;
  const float c = cs[2 * i], sn = sign * cs[2 * i + 1];
  const float lo = head[i], hi = head[i + half];
  head[i] = lo * c - hi * sn;
  head[i + half] = hi * c + lo * sn;
}

}  // namespace cuda

namespace cpu {

// qkv is [N, (NH + 2 KV) hd] (N = B T rows, position n % T): q and k
// turned in place by the rotary `table` [T, hd/2, 2] (model/rope.h), or
// their gradients turned back.
using cuda::RopeShape;
void rope_forward(float* qkv, const float* table, const RopeShape& s, int64_t N);
void rope_backward(float* dqkv, const float* table, const RopeShape& s, int64_t N);

}  // namespace cpu
}  // namespace zerod
