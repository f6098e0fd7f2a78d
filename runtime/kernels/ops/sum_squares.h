// Sums to one double in a fixed order, for the gradients' norm and the
// losses: sum(x) of doubles, and sum(x^2) of floats taken in double, in an
// order (below) that gives the same bits at any thread count and on the
// GPU, where a block of kSquaresLanes threads takes a chunk. Bound by
// memory bandwidth: each element is read once.
//
// The CPU's (sum_squares.cc) runs the lanes as a vectorised loop; the CUDA
// table's (sum_squares.cuh) runs the bodies below on blocks, a rank's
// gradients in groups of tensors a launch.
#pragma once

#include <cstdint>

#include "runtime/kernels/ops/hd.h"

namespace zerod {
namespace cpu {

// x[0] + x[1] + ... in that order.
double sum(const double* x, int64_t n);

// Sum of squares in double, in an order that gives the same bits for any
// thread count and on the GPU (a block of kSquaresLanes threads a chunk).
// Chunk [lo, hi) = [c kSquaresChunk, min(lo + kSquaresChunk, n)) has
// kSquaresLanes lanes: lane t sums (double)x[i] * x[i], from 0.0, over
// i = lo + t, lo + t + kSquaresLanes, ... < hi; then, for stride =
// kSquaresLanes / 2, ..., 1, lane[t] += lane[t + stride] for t < stride,
// and lane[0] is the chunk's partial. The partials sum the same way.
inline constexpr int64_t kSquaresChunk = int64_t{1} << 16;
inline constexpr int kSquaresLanes = 256;
// The chunks of n elements.
inline constexpr int64_t squares_chunks(int64_t n) { return (n + kSquaresChunk - 1) / kSquaresChunk; }
double sum_squares(const float* x, int64_t n);
// One such sum to take: of x[0, n), into *out.
struct SquaresOf {
  const float* x;
  int64_t n;
  double* out;
};
// x[0] + ... + x[n - 1] in the partials' order above (kSquaresLanes lanes,
// then their tree): the order of the GPU table's sum.
double sum_in_lanes(const double* x, int64_t n);

}  // namespace cpu

namespace cuda {

// cpu::sum_squares's order (above) on blocks of kSquaresLanes
// threads: lane `lane`'s sum of chunk c of x[0, n), then of the chunks'
// partials; each block's lanes then combine as a tree, one level at a time
// (reduce.cuh's block_tree_reduce on the GPU, a loop in tests).
ZD_HD double squares_lane(const float* x, int64_t n, int64_t c, int lane) {
  const int64_t lo = c * cpu::kSquaresChunk, hi = lo + cpu::kSquaresChunk < n ? lo + cpu::kSquaresChunk : n;
  double s = 0.0;
  for (int64_t i = lo + lane; i < hi; i += cpu::kSquaresLanes) s += static_cast<double>(x[i]) * x[i];
  return s;
}
// Lane `lane`'s share of x[0, n) (the chunks' partials, or any doubles to
// sum in cpu::sum_in_lanes's order).
ZD_HD double lane_share(const double* x, int64_t n, int lane) {
  double s = 0.0;
  for (int64_t i = lane; i < n; i += cpu::kSquaresLanes) s += x[i];
  return s;
}

// Sums of squares of up to kSquaresGroup tensors in two launches (a
// rank's gradients, unit by unit: gpt2's 28 launches become 2), carried by
// value as the kernels' parameter: the tensors' chunks numbered tensor
// after tensor, tensor j's from start[j]; an empty tensor has none, and
// its sum is 0. Each tensor's sum is sum_squares's alone, bit for bit.
inline constexpr int kSquaresGroup = 96;
struct SquaresGroup {
  int count = 0;
  int64_t start[kSquaresGroup + 1] = {};  // start[count]: the launch's chunks
  cpu::SquaresOf t[kSquaresGroup];
};
// Lane `lane`'s part of chunk `chunk` of the group, and of tensor j's
// total over its chunks' partials (partial[c] for the group's chunk c).
ZD_HD double squares_group_lane(const SquaresGroup& g, int64_t chunk, int lane) {
  const int j = group_member(g, chunk);
  return squares_lane(g.t[j].x, g.t[j].n, chunk - g.start[j], lane);
}
ZD_HD double squares_total_lane(const SquaresGroup& g, const double* partial, int j, int lane) {
  return lane_share(partial + g.start[j], g.start[j + 1] - g.start[j], lane);
}
// The tensors in groups of up to kSquaresGroup whose chunks fit
// `max_chunks` partials (each tensor's alone must), in order.
template <class Launch>
void for_squares_groups(const cpu::SquaresOf* ts, size_t n, int64_t max_chunks, Launch launch) {
  SquaresGroup g{};
  for (size_t i = 0; i < n; ++i) {
    const int64_t chunks = cpu::squares_chunks(ts[i].n);
    if (g.count == kSquaresGroup || (g.count > 0 && g.start[g.count] + chunks > max_chunks)) {
      launch(g);
      g = {};
    }
    g.t[g.count] = ts[i];
    g.start[g.count + 1] = g.start[g.count] + chunks;
    ++g.count;
  }
  if (g.count > 0) launch(g);
}

}  // namespace cuda
}  // namespace zerod
