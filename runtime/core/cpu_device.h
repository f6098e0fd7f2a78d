// The CPU as a Device: memory is host memory, and a stream is an ordered
// queue of host functions.
//
// Streams are synchronous by default: work runs on the calling thread as it
// is enqueued, so events are complete when recorded and the CPU trains as
// fast as plain calls would. With `threaded`, each stream runs its work on a
// thread of its own and, before one item in `delay_one_in` (drawn at
// random), sleeps a random 0..max_delay_us, so the host runs ahead of the
// streams by varying amounts, as it does of a GPU: a missing event wait or
// a host read before its stream's work has finished gives a wrong result
// here, in CI, instead of on a GPU. Both modes compute the same bits.
//
// With `device_only_memory`, the device's own allocations refuse host
// access (Buffer::host aborts) as GPU memory does, so host code that reads
// or writes what may live on a GPU is caught here too. With `gpu_tier` as
// well, the device stands in for a GPU in the accounts: its own memory is
// the gpu tier, held through a CachingAllocator that run.gpu_memory_limit
// caps, so what a GPU run keeps on the GPU and what it moves to the host
// are measured on the CPU. With `pins` too, its host staging is pinned as
// a GPU's is (registered through a test's PinningHook, which may delay
// it), and a copy that meets pinned memory not yet registered aborts: no
// copy may run before the registration it awaits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "runtime/core/caching_allocator.h"
#include "runtime/core/device.h"

namespace zerod {

struct CpuDeviceOptions {
  bool threaded = false;
  int max_delay_us = 500;
  int delay_one_in = 8;
  uint64_t seed = 1;  // of the delays
  bool device_only_memory = false;
  bool gpu_tier = false;  // implies device_only_memory
  bool pins = false;      // with gpu_tier: pinned host staging, as a GPU's
};

class CpuStream : public Stream {
 public:
  CpuStream(const CpuDeviceOptions& options, uint64_t seed);
  ~CpuStream() override;  // runs what is queued first

  // Runs f in stream order: now, or on the stream's thread.
  template <class F>
  void launch(F&& f) {
    if (queue_) {
      enqueue(std::function<void()>(std::forward<F>(f)));
    } else {
      f();
    }
  }

 private:
  struct Queue;
  void enqueue(std::function<void()> f);
  std::unique_ptr<Queue> queue_;
};

class CpuDevice : public Device {
 public:
  explicit CpuDevice(MemoryAccountant& acct = MemoryAccountant::global(), CpuDeviceOptions options = {});

  std::string name() const override { return "cpu"; }
  Tier memory_tier() const override { return options_.gpu_tier ? Tier::kGpu : Tier::kHost; }
  bool host_visible() const override { return !options_.device_only_memory && !options_.gpu_tier; }
  bool holds(const void* p) const override { return allocator_ && allocator_->holds(p); }
  bool pins_host_memory() const override { return options_.pins; }

  absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c) override;
  absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c, Tier t) override;
  Stream& compute_stream() override { return *compute_; }
  absl::StatusOr<std::unique_ptr<Stream>> create_stream() override;
  absl::StatusOr<std::unique_ptr<Event>> create_event() override;
  absl::StatusOr<std::unique_ptr<Event>> create_timing_event() override;
  absl::StatusOr<double> elapsed_ms(Event& start, Event& end) override;

  void memset(Stream& s, void* dst, int byte, uint64_t bytes) override;
  void record(Stream& s, Event& e) override;
  void wait(Stream& s, Event& e) override;

  // Runs f on stream s, in its order (what the CPU kernel table does).
  template <class F>
  static void launch(Stream& s, F&& f) {
    static_cast<CpuStream&>(s).launch(std::forward<F>(f));
  }

 protected:
  void copy_bytes(Stream& s, void* dst, const void* src, uint64_t bytes) override;
  absl::Status host_wait(Stream& s) override;
  absl::Status host_wait(Event& e) override;

 private:
  CpuDeviceOptions options_;
  uint64_t streams_made_ = 0;  // each stream's delays have a seed of their own
  std::unique_ptr<CpuStream> compute_;
  // gpu_tier: the device's memory, host memory accounted as the gpu tier.
  class HostRaw : public RawMemory {
   public:
    absl::StatusOr<void*> alloc(uint64_t bytes) override;
    void free(void* p) override;
  };
  HostRaw raw_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace zerod
