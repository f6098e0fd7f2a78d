#include <algorithm>
#include <vector>

#include "runtime/kernels/cpu/cpu_kernels.h"

namespace zerod::cpu {

double sum_squares(const float* x, int64_t n) {
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kSquaresChunk, hi = std::min(n, lo + kSquaresChunk);
    double s = 0.0;
    for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace zerod::cpu
