// Rotary positions on the CPU: rope.h's body, a pair at a time across
// cores.
#include "runtime/kernels/ops/rope.h"

namespace zerod::cpu {

void rope_forward(float* qkv, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * s.pairs(); ++j) cuda::rope_pair_at(j, qkv, table, s, 1.0f);
}

void rope_backward(float* dqkv, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * s.pairs(); ++j) cuda::rope_pair_at(j, dqkv, table, s, -1.0f);
}

}  // namespace zerod::cpu
