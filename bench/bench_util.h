// Helpers of the benchmark programs: timing a call, alternating two passes,
// stopping on an error, and the small job the checkpoint benchmarks use.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/job_config.h"
#include "runtime/core/device.h"
#include "runtime/core/status.h"

namespace zerod::bench {

inline double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Round r of two passes compared with each other: a then b on even rounds,
// b then a on odd ones, so neither always follows the other.
inline void alternate(int r, const std::function<void()>& a, const std::function<void()>& b) {
  if (r % 2 == 0) {
    a();
    b();
  } else {
    b();
    a();
  }
}

// Best wall time of f over enough calls to fill ~min_total seconds (at least 3).
inline double best_seconds(const std::function<void()>& f, double min_total = 1.0) {
  f();  // warm-up: page faults, caches
  double best = 1e30, total = 0;
  for (int i = 0; total < min_total || i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Best milliseconds of `runs` calls of f on d's compute stream after one
// warm-up call, timed by the stream's own events.
inline absl::StatusOr<double> best_device_ms(Device& d, const std::function<void()>& f, int runs) {
  Stream& s = d.compute_stream();
  ZEROD_ASSIGN_OR_RETURN(auto start, d.create_timing_event());
  ZEROD_ASSIGN_OR_RETURN(auto end, d.create_timing_event());
  f();
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    d.record(s, *start);
    f();
    d.record(s, *end);
    ZEROD_RETURN_IF_ERROR(d.synchronize(*end));
    ZEROD_ASSIGN_OR_RETURN(const double ms, d.elapsed_ms(*start, *end));
    best = std::min(best, ms);
  }
  return best;
}

// Host buffer, first touched by the threads that will use it.
inline std::vector<float> filled(int64_t n, float value) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = value + 1e-7f * static_cast<float>(i % 1000);
  return v;
}

// A STREAM-style triad a = b + 3c over n floats an array, in GB/s as
// STREAM counts it (12 bytes an element): the memory bandwidth a kernel's
// own is compared with.
inline double triad_gbs(int64_t n) {
  std::vector<float> a = filled(n, 0), b = filled(n, 1), c = filled(n, 2);
  const double s = best_seconds([&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
  });
  return 3.0 * 4.0 * n / s / 1e9;
}

// Exits with the message when s is an error.
inline void check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

template <class T>
T checked(absl::StatusOr<T> v) {
  check(v.status());
  return *std::move(v);
}

// `preset` trained in fp32 with AdamW by a world of one, on synthetic data
// one sequence of 64 tokens at a time.
inline JobConfig fp32_adamw_job(const std::string& preset) {
  const nlohmann::json j = {{"model", {{"preset", preset}}},
                            {"data", {{"kind", "synthetic"}, {"seq_len", 64}}},
                            {"train_micro_batch_size_per_gpu", 1},
                            {"optimizer", {{"type", "AdamW"}}}};
  return checked(parse_job_config(j, 1));
}

}  // namespace zerod::bench
