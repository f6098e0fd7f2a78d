// The fixed-order sums' launches (sum_squares.h). Included by the CUDA
// table alone.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/ops/sum_squares.h"

namespace zerod::cuda {

static_assert(sizeof(SquaresGroup) + 64 <= 4096, "a launch's parameters, with a lambda's own");

// In cpu::sum_in_lanes's order, on one block: a lane's share, then their
// tree.
inline void sum(cudaStream_t s, const double* x, int64_t n, double* out) {
  launch_block_rows(s, 1, "sum", [=] __device__(int64_t, int lane, int) {
    const double total = block_tree_reduce<cpu::kSquaresLanes>(lane_share(x, n, lane), Sum());
    if (lane == 0) *out = total;
  });
}

// A group's chunks, a block each, then its tensors' totals, a block each.
// The chunks' partial sums share `partial` (max_chunks doubles): the table
// serves one stream at a time (the compute stream). A tensor of more
// chunks than that is a bug of the sizes, so it aborts.
inline void sum_squares_tensors(cudaStream_t s, double* partial, int64_t max_chunks, const cpu::SquaresOf* ts,
                                size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (cpu::squares_chunks(ts[i].n) > max_chunks) {
      std::fprintf(stderr, "zerod: sum_squares of %lld elements exceeds the table's %lld chunks\n",
                   static_cast<long long>(ts[i].n), static_cast<long long>(max_chunks));
      std::abort();
    }
  }
  static_assert(cpu::kSquaresLanes == kBlockThreads);
  for_squares_groups(ts, n, max_chunks, [&](const SquaresGroup& g) {
    launch_block_rows(s, g.start[g.count], "sum_squares_chunks", [=] __device__(int64_t c, int lane, int) {
      const double p = block_tree_reduce<cpu::kSquaresLanes>(squares_group_lane(g, c, lane), Sum());
      if (lane == 0) partial[c] = p;
    });
    launch_block_rows(s, g.count, "sum_squares_totals", [=] __device__(int64_t j, int lane, int) {
      const double total =
          block_tree_reduce<cpu::kSquaresLanes>(squares_total_lane(g, partial, static_cast<int>(j), lane), Sum());
      if (lane == 0) *g.t[j].out = total;
    });
  });
}

}  // namespace zerod::cuda
