// Reductions across a warp or a block, in a fixed order so that a run
// gives the same bits every time, and with every thread getting the same
// result (lane 0's, or the same sequence of combines), so that no lane
// acts on a value its neighbours do not share.
#pragma once

#include <cuda_runtime.h>

namespace zerod::cuda {

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
// As the CPU kernels take a maximum: b unless a is larger.
struct Max {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Across the 32 lanes of a full warp (all lanes must call it).
template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return __shfl_sync(0xffffffffu, v, 0);
}

// Across a block whose size is a multiple of 32 (all threads must call
// it): each warp's result, then the warps' in order.
template <class T, class Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T parts[32];
  v = warp_reduce(v, op);
  __syncthreads();  // the previous call's readers are done with parts
  if (threadIdx.x % 32 == 0) parts[threadIdx.x / 32] = v;
  __syncthreads();
  v = parts[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) v = op(v, parts[w]);
  return v;
}

// Across a block of kLanes threads, kLanes a power of two (all threads
// must call it), as a pairwise tree: for stride = kLanes / 2, ..., 1, lane
// t < stride combines lane t + stride's value into its own. Lane 0's
// result, for every thread.
template <int kLanes, class T, class Op>
__device__ T block_tree_reduce(T v, Op op) {
  static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0);
  __shared__ T lanes[kLanes];
  const unsigned t = threadIdx.x;
  __syncthreads();  // the previous call's readers are done with lanes
  lanes[t] = v;
  __syncthreads();
  for (unsigned stride = kLanes / 2; stride > 0; stride /= 2) {
    if (t < stride) lanes[t] = op(lanes[t], lanes[t + stride]);
    __syncthreads();
  }
  return lanes[0];
}

}  // namespace zerod::cuda
