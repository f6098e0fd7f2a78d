// Rotary positions and grouped-query attention's input, the Llama family's:
// from a row of q (NH heads), k and v (KV heads each) of hd, the row
// [q' | k' | v'] of NH heads each that attention takes, where for a head's
// element d < hd/2 at position p and angle theta_d(p) (model/rope.h's table)
//   q'[d] = q[d] cos - q[d + hd/2] sin,  q'[d + hd/2] = q[d + hd/2] cos + q[d] sin
// (k' likewise), and every key and value head is repeated for the NH / KV
// query heads that share it. The backward turns q's gradient back (the
// transpose: sin negated) and sums each key and value head's gradient over
// its query heads, in head order.
// Memory-bound, an element a thread: it reads (NH + 2 KV) hd and writes
// 3 NH hd a row forward, the reverse backward.
//
// One body for both tables: the CPU's (rope.cc) over its cores, the CUDA
// table's (rope.cuh) over its grid.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cuda {

// The attention's input from a row of q (NH heads), k and v (KV heads
// each) of hd: q and k turned by their position's angles, every key and
// value head repeated for the NH / KV query heads that share it; a row of
// [q | k | v], NH heads each, as the attention kernels take.
struct RopeShape {
  int T, NH, KV, hd;
  ZD_HD int64_t width() const { return int64_t(NH + 2 * KV) * hd; }  // a row of the input
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
// Element j of the [N, 3C] output; `table` is [T, hd/2, 2].
template <class O, class X>
ZD_HD void rope_forward_at(int64_t j, O out, X qkv, const float* table, const RopeShape& s) {
  const int64_t C = s.C(), n = j / (3 * C), c = j % (3 * C);
  const int part = static_cast<int>(c / C), h = static_cast<int>(c % C / s.hd), d = static_cast<int>(c % s.hd);
  const int kv = h / (s.NH / s.KV);
  const int64_t src = part == 0 ? int64_t(h) * s.hd : C + (part - 1) * int64_t(s.KV) * s.hd + int64_t(kv) * s.hd;
  const X head = qkv + (n * s.width() + src);
  if (part == 2) {
    out[j] = head[d];
  } else {
    out[j] = rope_turn(head, table + (n % s.T) * s.hd, d, s.hd, 1.0f);
  }
}
// Element j of the [N, width] gradient of the compact q, k and v: q turned
// back, k and v the sums over their query heads, in head order.
template <class O, class D>
ZD_HD void rope_backward_at(int64_t j, O dqkv, D dout, const float* table, const RopeShape& s) {
  const int64_t C = s.C(), n = j / s.width(), c = j % s.width();
  const int d = static_cast<int>(c % s.hd);
  const float* cs = table + (n % s.T) * s.hd;
  const D row = dout + n * 3 * C;
  if (c < C) {
    dqkv[j] = rope_turn(row + (c - d), cs, d, s.hd, -1.0f);
    return;
  }
  const int part = c < C + int64_t(s.KV) * s.hd ? 1 : 2;
  const int kv = static_cast<int>((c - C - (part - 1) * int64_t(s.KV) * s.hd) / s.hd), group = s.NH / s.KV;
  float g = 0.0f;
  for (int h = kv * group; h < (kv + 1) * group; ++h) {
    const D head = row + (part * C + int64_t(h) * s.hd);
    g += part == 2 ? static_cast<float>(head[d]) : rope_turn(head, cs, d, s.hd, -1.0f);
  }
  dqkv[j] = g;
}

}  // namespace cuda

namespace cpu {

// Grouped-query attention's input: qkv is [N, (NH + 2 KV) hd] (N = B T
// rows, position n % T), out [N, 3C] with C = NH hd, q and k turned by
// the rotary `table` [T, hd/2, 2] (model/rope.h), each key and value head
// repeated for its NH / KV query heads. Backward:
// dqkv [N, (NH + 2 KV) hd] overwritten from dout [N, 3C].
using cuda::RopeShape;
void rope_forward(float* out, const float* qkv, const float* table, const RopeShape& s, int64_t N);
void rope_backward(float* dqkv, const float* dout, const float* table, const RopeShape& s, int64_t N);

}  // namespace cpu
}  // namespace zerod
