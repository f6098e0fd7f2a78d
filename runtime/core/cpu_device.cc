#include "runtime/core/cpu_device.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/core/memory.h"
#include "runtime/core/pinned_host.h"

namespace zerod {
namespace {

// An event is a count of points recorded and of points reached; the state
// is shared with the queued work that completes or waits on it, so an
// event may be destroyed while such work is pending.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, reached = 0;
  std::chrono::steady_clock::time_point reached_at;  // when `reached` last grew

  void reach(uint64_t point) {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (point > reached) reached_at = now;
      reached = std::max(reached, point);
    }
    cv.notify_all();
  }
  void wait_for(uint64_t point) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached >= point; });
  }
};

class CpuEvent : public Event {
 public:
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

EventState& state_of(Event& e) { return *static_cast<CpuEvent&>(e).state; }

}  // namespace

struct CpuStream::Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  bool stopping = false;
  std::mt19937_64 rng;
  std::uniform_int_distribution<int> delay_us, delay_now;
  std::thread thread;

  Queue(uint64_t seed, const CpuDeviceOptions& o)
      : rng(seed), delay_us(0, std::max(0, o.max_delay_us)), delay_now(1, std::max(1, o.delay_one_in)) {
    thread = std::thread([this] { run(); });
  }
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    thread.join();
  }
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !work.empty(); });
        if (work.empty()) return;  // stopping, and everything queued has run
        f = std::move(work.front());
        work.pop_front();
      }
      if (delay_now(rng) == 1) std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
      f();
    }
  }
};

CpuStream::CpuStream(const CpuDeviceOptions& options, uint64_t seed) {
  if (options.threaded) queue_ = std::make_unique<Queue>(seed, options);
}

CpuStream::~CpuStream() = default;

void CpuStream::enqueue(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->work.push_back(std::move(f));
  }
  queue_->cv.notify_one();
}

CpuDevice::CpuDevice(MemoryAccountant& acct, CpuDeviceOptions options)
    : Device(acct), options_(options), compute_(std::make_unique<CpuStream>(options_, options_.seed)) {
  if (options_.gpu_tier) allocator_ = std::make_unique<CachingAllocator>(Tier::kGpu, acct, raw_);
}

absl::StatusOr<void*> CpuDevice::HostRaw::alloc(uint64_t bytes) {
  void* p = std::aligned_alloc(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  if (!p) return absl::ResourceExhaustedError(absl::StrCat("out of host memory for ", bytes, " bytes"));
  return p;
}

void CpuDevice::HostRaw::free(void* p) { std::free(p); }

absl::StatusOr<Buffer> CpuDevice::allocate(uint64_t bytes, Category c) {
  if (allocator_) {
    ZEROD_ASSIGN_OR_RETURN(Buffer b, allocator_->allocate(bytes, c));
    b.set_device_only();
    return b;
  }
  ZEROD_ASSIGN_OR_RETURN(Buffer b, allocate(bytes, c, Tier::kHost));
  if (options_.device_only_memory) b.set_device_only();
  return b;
}

absl::StatusOr<Buffer> CpuDevice::allocate(uint64_t bytes, Category c, Tier t) {
  if (allocator_ && t == Tier::kGpu) return allocate(bytes, c);
  // Pinned memory is host memory too: the host's side of a GPU's offload
  // (states the GPU updates in parts) is pinned where a CUDA device runs.
  if (t != Tier::kHost && t != Tier::kPinned) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cpu device has host memory only, not ", tier_name(t), " (", bytes, " bytes of ",
                     category_name(c), ")"));
  }
  return Device::allocate(bytes, c, t);
}

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::create_stream() {
  return std::make_unique<CpuStream>(options_, options_.seed + ++streams_made_);
}

absl::StatusOr<std::unique_ptr<Event>> CpuDevice::create_event() { return std::make_unique<CpuEvent>(); }

absl::StatusOr<std::unique_ptr<Event>> CpuDevice::create_timing_event() { return create_event(); }

absl::StatusOr<double> CpuDevice::elapsed_ms(Event& start, Event& end) {
  std::chrono::steady_clock::time_point at[2];
  Event* events[2] = {&start, &end};
  for (int i = 0; i < 2; ++i) {
    EventState& state = state_of(*events[i]);
    std::lock_guard<std::mutex> lock(state.mu);
    if (state.recorded == 0 || state.reached < state.recorded) {
      return absl::FailedPreconditionError("elapsed_ms: an event not recorded, or not yet reached");
    }
    at[i] = state.reached_at;
  }
  return std::chrono::duration<double, std::milli>(at[1] - at[0]).count();
}

void CpuDevice::memset(Stream& s, void* dst, int byte, uint64_t bytes) {
  // Large ones (optimizer states) over the host's threads.
  launch(s, [=] { parallel_fill(dst, byte, bytes); });
}

void CpuDevice::copy_bytes(Stream& s, void* dst, const void* src, uint64_t bytes) {
  const bool pins = options_.pins;
  // Large copies: optimizer states set aside, shards.
  launch(s, [=] {
    if (pins && (pinning_pending(dst, bytes) || pinning_pending(src, bytes))) {
      std::fprintf(stderr, "zerod: a copy of %llu bytes ran from pinned memory not yet registered\n",
                   static_cast<unsigned long long>(bytes));
      std::abort();
    }
    parallel_copy(dst, src, bytes);
  });
}

void CpuDevice::record(Stream& s, Event& e) {
  std::shared_ptr<EventState> state = static_cast<CpuEvent&>(e).state;
  uint64_t point;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    point = ++state->recorded;
  }
  launch(s, [state, point] { state->reach(point); });
}

void CpuDevice::wait(Stream& s, Event& e) {
  std::shared_ptr<EventState> state = static_cast<CpuEvent&>(e).state;
  uint64_t point;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    point = state->recorded;
  }
  launch(s, [state, point] { state->wait_for(point); });
}

absl::Status CpuDevice::host_wait(Stream& s) {
  CpuEvent done;
  record(s, done);
  return host_wait(done);
}

absl::Status CpuDevice::host_wait(Event& e) {
  EventState& state = state_of(e);
  uint64_t point;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    point = state.recorded;
  }
  state.wait_for(point);
  return absl::OkStatus();
}

}  // namespace zerod
