// Launching the bodies: one thread per index, in blocks of 256, each
// launch checked (and, in debug builds, the bodies' ZD_ASSERTs). A launch that fails is a bug of the table (a bad
// configuration), so it aborts naming the kernel; debug builds also wait
// for each kernel, so that a fault is reported at the kernel that made it
// rather than at the next synchronize.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace zerod::cuda {

inline void check_launch(cudaStream_t s, const char* what) {
  cudaError_t err = cudaGetLastError();
#ifndef NDEBUG
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
#else
  (void)s;
#endif
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "zerod: CUDA kernel %s failed: %s\n", what, cudaGetErrorString(err));
  std::abort();
}

template <class F>
__global__ void for_each_index(int64_t n, F f) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) f(i);
}

// f(i) for i in [0, n) on stream s; f is a __device__ lambda.
template <class F>
void launch_each(cudaStream_t s, int64_t n, const char* what, F f) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) {
    std::fprintf(stderr, "zerod: CUDA kernel %s over %lld indices exceeds the grid\n", what, static_cast<long long>(n));
    std::abort();
  }
  for_each_index<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(n, f);
  check_launch(s, what);
}

}  // namespace zerod::cuda
