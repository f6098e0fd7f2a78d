// Central finite differences for gradient tests.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "runtime/model/gpt_layout.h"

namespace zerod::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  NormalRng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.next() * scale);
  return v;
}

// (f(x + eps*d) - f(x - eps*d)) / (2 eps), restoring x afterwards.
inline double directional_fd(const std::function<double()>& f, float* x, const std::vector<float>& d, double eps) {
  std::vector<float> saved(x, x + d.size());
  for (size_t i = 0; i < d.size(); ++i) x[i] = static_cast<float>(saved[i] + eps * d[i]);
  const double up = f();
  for (size_t i = 0; i < d.size(); ++i) x[i] = static_cast<float>(saved[i] - eps * d[i]);
  const double down = f();
  for (size_t i = 0; i < d.size(); ++i) x[i] = saved[i];
  return (up - down) / (2 * eps);
}

inline double dot(const float* a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < b.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace zerod::testing
