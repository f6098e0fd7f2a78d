// The embedding on the CPU: positions in order, a thread a range of
// columns (embedding.h).
#include "runtime/kernels/ops/embedding.h"

#include <omp.h>

#include <algorithm>

namespace zerod::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       const int32_t* pos) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (int64_t(b) * T + t) * C;
      const float* we = wte + int64_t(tokens[b * T + t]) * C;
      if (!wpe) {
        std::copy(we, we + C, o);
        continue;
      }
      const float* pe = wpe + position_of(pos, int64_t(b) * T + t, T) * C;
      for (int i = 0; i < C; ++i) o[i] = we[i] + pe[i];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        const int32_t* pos) {
  // Tokens repeat, so rows of dwte collide: each thread owns a range of
  // channels and walks all positions in order (deterministic, race-free).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), th = omp_get_thread_num();
    const int lo = static_cast<int>(int64_t(C) * th / nt), hi = static_cast<int>(int64_t(C) * (th + 1) / nt);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* d = dout + (int64_t(b) * T + t) * C;
        float* we = dwte + int64_t(tokens[b * T + t]) * C;
        for (int i = lo; i < hi; ++i) we[i] += d[i];
        if (!dwpe) continue;
        float* pe = dwpe + position_of(pos, int64_t(b) * T + t, T) * C;
        for (int i = lo; i < hi; ++i) pe[i] += d[i];
      }
    }
  }
}

}  // namespace zerod::cpu
