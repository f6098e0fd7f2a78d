// A Device is where the model's tensors live and its kernels run: accounted
// allocations, streams, events, memset and copies between tiers. The model
// and the ZeRO engine see only this and the device's kernel table
// (runtime/kernels/kernels.h), so one engine serves the CPU and the GPU.
//
// The contract, as CUDA's:
// - Work enqueued on one stream runs in the order it was enqueued.
// - Work on different streams, and host code, are ordered only through
//   events: record(s, e) marks the point s has reached; wait(t, e) makes
//   later work on t start after that point; synchronize(e) blocks the host
//   until it.
// - The host may read or write memory that stream work uses only after a
//   synchronize that covers that work, and must not free it before then.
// - Pointers handed to memset, copy and the kernels are addresses in the
//   memory's own tier (Buffer::ptr): device addresses for kGpu, host
//   addresses for kHost and kPinned.
// - Failures of enqueued work are reported by the next synchronize.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/core/status.h"

namespace zerod {

class Profiler;

class Stream {
 public:
  virtual ~Stream() = default;
};

class Event {
 public:
  virtual ~Event() = default;
};

class Device {
 public:
  explicit Device(MemoryAccountant& acct) : acct_(&acct) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Host code's part of the device's own memory: p holds its bytes
  // [offset, offset + n).
  using HostPart = std::function<absl::Status(void* p, uint64_t offset, uint64_t n)>;

  // "cpu", "cuda:0".
  virtual std::string name() const = 0;
  // For people: the name and, for a GPU, its model ("cuda:0 (NVIDIA H100 80GB HBM3)").
  virtual std::string description() const { return name(); }
  // The tier the kernels' operands live in: kHost on the CPU, kGpu on a GPU.
  virtual Tier memory_tier() const = 0;
  // Bytes of its own memory this process can hold (a GPU's free memory
  // once opened); 0 where that is not known.
  virtual uint64_t usable_bytes() const { return 0; }
  // FLOP/s of its dense 16-bit matrix products (a GPU's tensor cores, fp32
  // accumulation); 0 where not known (a CPU's is measured instead).
  virtual double peak_flops() const { return 0; }
  // Whether host code may dereference the device's own memory; where it may
  // not, it reaches it through read_on_host and write_from_host.
  virtual bool host_visible() const { return memory_tier() != Tier::kGpu; }
  MemoryAccountant& accountant() const { return *acct_; }
  // Whether its host staging is pinned (runtime/core/pinned_host.h): a
  // CUDA GPU's, whose copies run at the link's speed only from pinned memory.
  virtual bool pins_host_memory() const { return false; }
  // Whether p is an address in the device's own memory that host code
  // cannot reach (a GPU's, or a CPU device's standing in for one): what a
  // communicator of host memory must have staged.
  virtual bool holds(const void* /*p*/) const { return false; }
  // Makes the device the calling thread's own (CUDA's current device is per
  // thread), for threads besides the one that opened it.
  virtual absl::Status bind_thread() { return absl::OkStatus(); }

  // An accounted allocation on the device's own tier, or on tier t (pinned
  // or plain host memory for staging; refused where the device has no such
  // memory).
  virtual absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c) { return allocate(bytes, c, memory_tier()); }
  virtual absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c, Tier t);

  // The stream the model's kernels run on.
  virtual Stream& compute_stream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> create_stream() = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> create_event() = 0;
  // An event that also keeps when it was reached, for elapsed_ms (on a GPU
  // such events cost more to record, so plain ones keep no time).
  virtual absl::StatusOr<std::unique_ptr<Event>> create_timing_event() = 0;
  // Milliseconds from `start` being reached to `end` being reached, both
  // timing events, each recorded and reached (synchronize on `end` first).
  virtual absl::StatusOr<double> elapsed_ms(Event& start, Event& end) = 0;

  virtual void memset(Stream& s, void* dst, int byte, uint64_t bytes) = 0;
  // Between any two tiers this device can address; timed by direction
  // when a profiler is set.
  void copy(Stream& s, void* dst, const void* src, uint64_t bytes);
  virtual void record(Stream& s, Event& e) = 0;
  virtual void wait(Stream& s, Event& e) = 0;
  // The host waits for the work enqueued on s so far; or until the point
  // last recorded on e (at once for an event never recorded). Each is a
  // host wait, counted and timed in host_waits().
  absl::Status synchronize(Stream& s);
  absl::Status synchronize(Event& e);
  // The host waits since the device was opened, from any thread, and the
  // seconds they took: where the host stopped for the device.
  struct HostWaits {
    uint64_t count = 0;
    double seconds = 0;
  };
  HostWaits host_waits() const;

  // Host code reads `bytes` at src in the device's own memory once the work
  // on s is done: `part` sees them in order, in parts whose sizes are
  // multiples of 8 bytes (the last excepted): the memory itself where it is
  // host-visible, else copies staged through host memory.
  absl::Status read_on_host(Stream& s, const void* src, uint64_t bytes, const HostPart& part);
  // Host code writes `bytes` at dst in the device's own memory once the
  // work on s is done: `part` fills each part, as above.
  absl::Status write_from_host(Stream& s, void* dst, uint64_t bytes, const HostPart& part);
  // The host workspace those two take for `bytes` where the memory is not
  // host-visible (none elsewhere), freed when they return.
  static uint64_t host_staging_bytes(uint64_t bytes);

  // Where the time of copies, and of the work of whoever asks, is kept
  // (the config's wall_clock_breakdown); none by default.
  void set_profiler(Profiler* p) { profiler_ = p; }
  Profiler* profiler() const { return profiler_; }

 protected:
  virtual void copy_bytes(Stream& s, void* dst, const void* src, uint64_t bytes) = 0;
  // synchronize()'s wait itself.
  virtual absl::Status host_wait(Stream& s) = 0;
  virtual absl::Status host_wait(Event& e) = 0;

 private:
  // The time of a host wait, in host_waits().
  absl::Status timed_wait(const std::function<absl::Status()>& wait);

  MemoryAccountant* acct_;
  Profiler* profiler_ = nullptr;
  std::atomic<uint64_t> waits_{0}, wait_ns_{0};
};

// A HostPart over elements of T: part(p, start, n) sees elements
// [start, start + n) at p.
template <class T, class F>
Device::HostPart host_elements(F part) {
  return [part = std::move(part)](void* p, uint64_t offset, uint64_t bytes) {
    return part(static_cast<T*>(p), static_cast<int64_t>(offset / sizeof(T)), static_cast<int64_t>(bytes / sizeof(T)));
  };
}

// Whether `device` is a CUDA GPU (not a CPU device, even one standing in
// for a GPU).
bool is_cuda_device(const Device& device);
// What of `device` decides a memory plan's sizes and tiers.
PlanDevice plan_device(const Device& device);
// The buffer `b` describes, on `device`: on its tier, else in the device's
// own memory.
absl::StatusOr<Buffer> allocate_spec(Device& device, const BufferSpec& b);
// The tier of host buffers that `device` copies to and from: pinned on a
// CUDA GPU, plain host memory otherwise.
Tier staging_tier(const Device& device);

// A GPU's dense 16-bit peak: NVIDIA's published figure for the parts it
// knows (compute capability, SM count), else SMs x the architecture's
// tensor-core FLOPs a clock x `clock_hz`; 0 for an architecture it does not know.
double dense_16bit_peak_flops(int major, int minor, int sms, double clock_hz);

// The device `run.device` names for the rank that is `local_rank` on its
// machine: "cpu"; "cuda", that rank's GPU (GPU local_rank modulo those
// visible, so ranks past the GPUs share them; refused, naming the reason,
// where there is none); "auto", "cuda" where the machine has a GPU, else "cpu".
absl::StatusOr<std::unique_ptr<Device>> open_device(std::string_view name, int local_rank = 0,
                                                    MemoryAccountant& acct = MemoryAccountant::global());

}  // namespace zerod
