// The CPU kernels' matrix product: row-major C = alpha * op(A) * op(B) + beta * C
// through OpenBLAS, the same bits at any thread count.
//
// OpenBLAS splits a product among its threads where the thread count says,
// and its kernels for the edges of a block sum the K products in another
// order than those for the inside (its AVX2 kernels do: on a Zen host 3 to
// 16% of the elements of a model's products changed between 1 and 2
// threads). So C is cut into tiles fixed by its shape alone, and each tile
// is one single-threaded OpenBLAS call (OpenBLAS runs single-threaded
// inside an OpenMP parallel region), the tiles spread over the threads:
// which thread computes a tile changes nothing. Called inside a parallel
// region (attention's loop over heads) the tiles run in order on the caller.
#pragma once

#include <cstdint>

namespace zerod::cpu {

// op(A) is [M, K]: A itself (lda >= K) or, with trans_a, A^T of a stored
// [K, M] (lda >= M); op(B) is [K, N] likewise; C is [M, N] (ldc >= N).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// FLOP/s of this sgemm on the calling thread's team, the best of three
// 1024^3 products: what the CPU path's MFU is measured against.
double measure_sgemm_flops();

// A product of at most this many multiply-adds is one call (one tile): it
// keeps the bits of one single-threaded OpenBLAS call (those the fixtures of
// tests/mpi_test_bitwise.cc hold) at the price of one thread (gpt2-tiny
// trains 13% slower on two cores: bench/RESULTS.md). A larger one is cut
// into kSgemmTile-square tiles.
inline constexpr int64_t kSgemmOneCall = int64_t{1} << 24;
inline constexpr int64_t kSgemmTile = 256;

}  // namespace zerod::cpu
