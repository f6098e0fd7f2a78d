// The fixed-order sums on the CPU (sum_squares.h).
#include "runtime/kernels/ops/sum_squares.h"

#include <algorithm>
#include <vector>

namespace zerod::cpu {
namespace {

static_assert((kSquaresLanes & (kSquaresLanes - 1)) == 0 && kSquaresChunk % kSquaresLanes == 0);

// term(0) + ... + term(n - 1) in sum_squares's order: kSquaresLanes lanes,
// then their tree. The lanes advance together so that the loop vectorises.
template <class Term>
double lanes_sum(int64_t n, Term term) {
  double lane[kSquaresLanes] = {};
  int64_t i = 0;
  for (; i + kSquaresLanes <= n; i += kSquaresLanes) {
    for (int t = 0; t < kSquaresLanes; ++t) lane[t] += term(i + t);
  }
  for (int t = 0; i + t < n; ++t) lane[t] += term(i + t);
  for (int stride = kSquaresLanes / 2; stride > 0; stride /= 2) {
    for (int t = 0; t < stride; ++t) lane[t] += lane[t + stride];
  }
  return lane[0];
}

}  // namespace

double sum_squares(const float* x, int64_t n) {
  const int64_t chunks = squares_chunks(n);
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const float* y = x + c * kSquaresChunk;
    partial[c] = lanes_sum(std::min(n - c * kSquaresChunk, kSquaresChunk),
                           [y](int64_t i) { return static_cast<double>(y[i]) * y[i]; });
  }
  return lanes_sum(chunks, [&partial](int64_t i) { return partial[i]; });
}

double sum(const double* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

double sum_in_lanes(const double* x, int64_t n) {
  return lanes_sum(n, [x](int64_t i) { return x[i]; });
}

}  // namespace zerod::cpu
