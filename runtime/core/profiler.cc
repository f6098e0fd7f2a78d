#include "runtime/core/profiler.h"

#include <utility>

namespace zerod {

Profiler::HostSpan::~HostSpan() {
  if (!p_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  std::lock_guard<std::mutex> lock(p_->mu_);
  Total& t = p_->host_totals_[what_];
  t.ms += ms;
  t.count += 1;
  t.bytes += bytes_;
}

std::unique_ptr<Event> Profiler::take_event() {
  if (!pool_.empty()) {
    std::unique_ptr<Event> e = std::move(pool_.back());
    pool_.pop_back();
    return e;
  }
  absl::StatusOr<std::unique_ptr<Event>> e = device_.create_timing_event();
  if (!e.ok()) {
    if (error_.ok()) error_ = e.status();
    return nullptr;
  }
  return std::move(*e);
}

Profiler::DeviceSpan Profiler::begin(Stream& s, std::string what, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Pending p{std::move(what), bytes, take_event(), take_event()};
  if (!p.start || !p.end) return DeviceSpan();
  device_.record(s, *p.start);
  pending_.push_back(std::move(p));
  return DeviceSpan(this, &s, pending_.size() - 1, round_);
}

void Profiler::end(Stream& s, size_t slot, uint64_t round) {
  std::lock_guard<std::mutex> lock(mu_);
  if (round != round_) return;
  device_.record(s, *pending_[slot].end);
  pending_[slot].ended = true;
}

absl::Status Profiler::collect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++round_;
  for (Pending& p : pending_) {
    if (!p.ended) {  // still open: dropped
      pool_.push_back(std::move(p.start));
      pool_.push_back(std::move(p.end));
      continue;
    }
    const absl::Status reached = device_.synchronize(*p.end);
    absl::StatusOr<double> ms = reached.ok() ? device_.elapsed_ms(*p.start, *p.end) : reached;
    if (!ms.ok()) {
      if (error_.ok()) error_ = ms.status();
      continue;
    }
    Total& t = device_totals_[p.what];
    t.ms += *ms;
    t.count += 1;
    t.bytes += p.bytes;
    pool_.push_back(std::move(p.start));
    pool_.push_back(std::move(p.end));
  }
  pending_.clear();
  return std::exchange(error_, absl::OkStatus());
}

Profiler::Totals Profiler::device_totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_totals_;
}

Profiler::Totals Profiler::host_totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_totals_;
}

void Profiler::add_launches(const std::string& what, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  device_totals_[what].launches += n;
}

void Profiler::add_host(const std::string& what, double ms, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  Total& t = host_totals_[what];
  t.ms += ms;
  t.count += count;
}

void Profiler::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  device_totals_.clear();
  host_totals_.clear();
}

}  // namespace zerod
