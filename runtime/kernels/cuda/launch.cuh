// Launching the bodies: one thread per index, one warp per row or one
// block per row, in blocks of 256 threads (512 for a row in shared
// memory). Each launch is checked; a launch that fails is a bug of the
// table (a bad configuration), so it aborts naming the kernel. Debug
// builds also wait for each kernel (and check the bodies' asserts), so
// that a fault is reported at the kernel that made it rather than at the
// next synchronize.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "runtime/core/dtype.h"

namespace zerod::cuda {

// Launches the CUDA tables have made in this process (kernels, and
// library products as one each): Kernels::launches().
inline std::atomic<int64_t>& launch_count() {
  static std::atomic<int64_t> n{0};
  return n;
}

inline void check_launch(cudaStream_t s, const char* what) {
  launch_count().fetch_add(1, std::memory_order_relaxed);
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

constexpr int kBlockThreads = 256;

// Blocks of a grid for `items` at `per_block` a block; a grid CUDA cannot
// launch is a bug of the sizes, so it aborts naming the kernel.
inline unsigned grid_blocks(int64_t items, int64_t per_block, const char* what) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  if (blocks > 0x7fffffff) {
    std::fprintf(stderr, "zerod: CUDA kernel %s over %lld items exceeds the grid\n", what,
                 static_cast<long long>(items));
    std::abort();
  }
  return static_cast<unsigned>(blocks);
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
  for_each_index<<<grid_blocks(n, kBlockThreads, what), kBlockThreads, 0, s>>>(n, f);
  check_launch(s, what);
}

// f(row, lane) for row in [0, rows), each row on one warp (lane 0-31), so
// that f may reduce across its warp.
template <class F>
__global__ void for_each_warp_row(int64_t rows, F f) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (row < rows) f(row, static_cast<int>(threadIdx.x % 32));
}

template <class F>
void launch_warp_rows(cudaStream_t s, int64_t rows, const char* what, F f) {
  if (rows <= 0) return;
  for_each_warp_row<<<grid_blocks(rows, kBlockThreads / 32, what), kBlockThreads, 0, s>>>(rows, f);
  check_launch(s, what);
}

// f(row, lane, lanes) for row in [0, rows), each row on one block of
// `lanes` threads, so that f may reduce across its block.
template <class F>
__global__ void for_each_block_row(F f) {
  f(int64_t(blockIdx.x), static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

template <class F>
void launch_block_rows(cudaStream_t s, int64_t rows, const char* what, F f) {
  if (rows <= 0) return;
  for_each_block_row<<<grid_blocks(rows, 1, what), kBlockThreads, 0, s>>>(f);
  check_launch(s, what);
}

// The same with kRowSharedLanes threads a block and `shared_bytes` of
// dynamic shared memory for each row's block, handed to f as its fourth
// argument (16-byte aligned): f(row, lane, lanes, shared). kBlocksAnSm
// blocks share an SM: two, each with up to kMaxRowSharedBytes and half
// the registers, or one with all of either. The caller keeps shared_bytes
// within the device's limit for that (row_shared_limits); the launch asks
// for it (above 48 KB a kernel must, on the current device) and for shared
// memory over L1 in the SM's split.
inline constexpr int kRowSharedLanes = 512;
inline constexpr int kMaxRowSharedBytes = 112 * 1024;
// What a row may take of the current device's shared memory with two
// blocks an SM and with one: one block takes its opt-in limit less 1 KB
// for a kernel's own (reduce.cuh's) shared arrays; two, half the SM's
// less that and the 1 KB the runtime keeps a block, at most
// kMaxRowSharedBytes (112 KB on sm_90, 80 KB on sm_80, 48 KB on sm_86,
// sm_89 and sm_120; one takes 226 KB on sm_90, 162 KB on sm_80, 98 KB on
// the others).
struct RowSharedLimits {
  int64_t two_an_sm = 0, one_an_sm = 0;
};
inline RowSharedLimits row_shared_limits() {
  int device = 0, optin = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
    return {};
  }
  const int64_t one = optin - 1024;
  const int64_t two = std::min<int64_t>({one, per_sm / 2 - 2048, kMaxRowSharedBytes});
  return {two, one};
}
template <int kBlocksAnSm, class F>
__global__ void __launch_bounds__(kRowSharedLanes, kBlocksAnSm) for_each_block_row_shared(F f) {
  extern __shared__ uint4 row_shared[];
  f(int64_t(blockIdx.x), static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), static_cast<void*>(row_shared));
}

template <int kBlocksAnSm, class F>
void launch_block_rows_shared(cudaStream_t s, int64_t rows, int64_t shared_bytes, const char* what, F f) {
  if (rows <= 0) return;
  constexpr int64_t kMax = kBlocksAnSm == 2 ? kMaxRowSharedBytes : 227 * 1024;  // sm_90's opt-in a block
  if (shared_bytes > kMax) {
    std::fprintf(stderr, "zerod: CUDA kernel %s asks for %lld bytes of shared memory a block, over %lld\n", what,
                 static_cast<long long>(shared_bytes), static_cast<long long>(kMax));
    std::abort();
  }
  auto* kernel = for_each_block_row_shared<kBlocksAnSm, F>;
  cudaError_t asked =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes));
  if (asked == cudaSuccess) {
    asked =
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  }
  if (asked != cudaSuccess) {
    std::fprintf(stderr, "zerod: CUDA kernel %s: %lld bytes of shared memory a block: %s\n", what,
                 static_cast<long long>(shared_bytes), cudaGetErrorString(asked));
    std::abort();
  }
  kernel<<<grid_blocks(rows, 1, what), kRowSharedLanes, static_cast<size_t>(shared_bytes), s>>>(f);
  check_launch(s, what);
}

// f(OperandTag<t>{}): the one place a run-time operand type picks the
// kernels compiled for it.
template <DType kT>
using OperandTag = std::integral_constant<DType, kT>;
template <class F>
decltype(auto) for_operands(DType t, F f) {
  if (t == DType::kBF16) return f(OperandTag<DType::kBF16>{});
  if (t == DType::kF16) return f(OperandTag<DType::kF16>{});
  return f(OperandTag<DType::kF32>{});
}

}  // namespace zerod::cuda
