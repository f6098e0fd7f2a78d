// What the load benchmarks (coordinator_load, http_load) keep of each
// client: its latencies by kind of call, its errors and the first of them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace zerod::bench {

struct Samples {
  std::vector<double> ms[3];  // by kind of call
  int64_t errors = 0;
  std::string first_error;
};

// The p-th quantile (0..1) of `v`, nearest rank; 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// Every client's samples as one.
inline Samples merge(const std::vector<Samples>& all) {
  Samples m;
  for (const Samples& s : all) {
    for (int k = 0; k < 3; ++k) m.ms[k].insert(m.ms[k].end(), s.ms[k].begin(), s.ms[k].end());
    m.errors += s.errors;
    if (m.first_error.empty()) m.first_error = s.first_error;
  }
  return m;
}

}  // namespace zerod::bench
