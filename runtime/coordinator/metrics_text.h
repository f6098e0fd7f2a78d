// zerod's figures in Prometheus' text exposition format (version 0.0.4):
// every job's state, progress, memory, restarts and heartbeat age, and the
// daemon's own requests by method and outcome with their latencies.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/coordinator/supervisor.h"

namespace zerod {

// Counts and latencies of the requests zerod serves (gRPC methods, HTTP
// paths), safe to record from any thread.
class RequestStats {
 public:
  // Upper bounds of the latency histogram's buckets, in seconds.
  static constexpr std::array<double, 12> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,   0.1,   0.25,   0.5,   1,    2.5};

  void record(std::string_view method, std::string_view code, double seconds);
  // Appends zerod_requests_total and zerod_request_duration_seconds.
  void render(std::string& out) const;

 private:
  struct Latency {
    std::array<uint64_t, kBuckets.size()> le{};  // cumulative, as Prometheus' buckets are
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> counts_;  // by (method, code)
  std::map<std::string, Latency> latency_;                          // by method
};

// The whole /metrics page.
std::string metrics_text(const std::vector<Supervisor::JobMetrics>& jobs, const RequestStats& stats);

// A label's value with Prometheus' escapes (backslash, quote, newline).
std::string label_value(std::string_view v);

}  // namespace zerod
