// Where a step's time goes (the config's wall_clock_breakdown): device
// time of named work on streams, from a pair of timing events around it,
// and host time of named blocks, each summed by name with its count and
// bytes until reset(). The device spans of one stream never overlap, so
// those of the compute stream add up to the time it was busy; the rest of
// a step's wall time the compute stream waited (on the host, on copies, on
// launches).
//
// Spans may be opened from any thread; a device span's events are read
// by collect(), after the work is done, so spans cost no synchronization.
// A device span still open at a collect() is dropped.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/status.h"

namespace zerod {

class Profiler {
 public:
  struct Total {
    double ms = 0.0;
    int64_t count = 0;
    uint64_t bytes = 0;
    int64_t launches = 0;  // device launches of a named work, where counted (add_launches)
  };
  using Totals = std::map<std::string, Total>;

  explicit Profiler(Device& device) : device_(device) {}
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Times the work enqueued on `s` while the span lives.
  class DeviceSpan {
   public:
    DeviceSpan() = default;
    DeviceSpan(DeviceSpan&& o) noexcept : p_(o.p_), s_(o.s_), slot_(o.slot_), round_(o.round_) { o.p_ = nullptr; }
    DeviceSpan& operator=(DeviceSpan&&) = delete;
    ~DeviceSpan() {
      if (p_) p_->end(*s_, slot_, round_);
    }

   private:
    friend class Profiler;
    DeviceSpan(Profiler* p, Stream* s, size_t slot, uint64_t round) : p_(p), s_(s), slot_(slot), round_(round) {}
    Profiler* p_ = nullptr;
    Stream* s_ = nullptr;
    size_t slot_ = 0;
    uint64_t round_ = 0;  // of collect()s: a span still open at one is dropped
  };
  // Times the calling thread while the span lives.
  class HostSpan {
   public:
    HostSpan() = default;
    HostSpan(HostSpan&& o) noexcept : p_(o.p_), what_(std::move(o.what_)), bytes_(o.bytes_), start_(o.start_) {
      o.p_ = nullptr;
    }
    HostSpan& operator=(HostSpan&&) = delete;
    ~HostSpan();

   private:
    friend class Profiler;
    HostSpan(Profiler* p, std::string what, uint64_t bytes)
        : p_(p), what_(std::move(what)), bytes_(bytes), start_(std::chrono::steady_clock::now()) {}
    Profiler* p_ = nullptr;
    std::string what_;
    uint64_t bytes_ = 0;
    std::chrono::steady_clock::time_point start_;
  };

  // Null-safe: with no profiler (the default) a span is nothing at all.
  static DeviceSpan device_span(Profiler* p, Stream& s, std::string what, uint64_t bytes = 0) {
    return p ? p->begin(s, std::move(what), bytes) : DeviceSpan();
  }
  static HostSpan host_span(Profiler* p, std::string what, uint64_t bytes = 0) {
    return p ? HostSpan(p, std::move(what), bytes) : HostSpan();
  }

  // Waits for the spans' work and adds their times to the totals (the
  // first error of creating an event or reading its time, if any).
  absl::Status collect();
  // Collected device and host totals, by name.
  Totals device_totals() const;
  Totals host_totals() const;
  // Adds n device launches to `what`'s device total.
  void add_launches(const std::string& what, int64_t n);
  // Adds `count` calls taking `ms` in all to `what`'s host total: host time
  // measured elsewhere (Device::host_waits).
  void add_host(const std::string& what, double ms, int64_t count);
  // Forgets the totals (say, after a warm-up step).
  void reset();

 private:
  struct Pending {
    std::string what;
    uint64_t bytes;
    std::unique_ptr<Event> start, end;
    bool ended = false;
  };

  DeviceSpan begin(Stream& s, std::string what, uint64_t bytes);
  void end(Stream& s, size_t slot, uint64_t round);
  std::unique_ptr<Event> take_event();  // from the pool, or new (null, error noted, on failure)

  Device& device_;
  mutable std::mutex mu_;
  std::vector<Pending> pending_;
  uint64_t round_ = 0;  // collect()s so far
  std::vector<std::unique_ptr<Event>> pool_;
  absl::Status error_;
  Totals device_totals_, host_totals_;
};

}  // namespace zerod
