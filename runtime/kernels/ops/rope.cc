// Rotary positions on the CPU: rope.h's bodies, an element at a time
// across cores.
#include "runtime/kernels/ops/rope.h"

namespace zerod::cpu {

void rope_forward(float* out, const float* qkv, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * s.width(); ++j) cuda::rope_at(j, out, qkv, table, s, 1.0f);
}

void rope_backward(float* dqkv, const float* dout, const float* table, const RopeShape& s, int64_t N) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < N * s.width(); ++j) cuda::rope_at(j, dqkv, dout, table, s, -1.0f);
}

}  // namespace zerod::cpu
