// Helpers of the benchmark programs: timing a call, alternating two passes,
// stopping on an error, and the small job the checkpoint benchmarks use.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/config/job_config.h"
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
