// One CUDA GPU as a Device (runtime/core/device.h): CUDA streams and
// events, device memory through a CachingAllocator that the accountant's
// GPU limit (run.gpu_memory_limit) caps, and pinned host memory in the
// pinned tier. Only CUDA sources include this; the rest of the program
// opens it through open_device.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "runtime/core/caching_allocator.h"
#include "runtime/core/device.h"

namespace zerod {

class CudaStream : public Stream {
 public:
  explicit CudaStream(cudaStream_t s) : s_(s) {}
  ~CudaStream() override;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_;
};

inline cudaStream_t cuda_stream(Stream& s) { return static_cast<CudaStream&>(s).get(); }

// A failed CUDA call as a status naming what was being done.
absl::Status cuda_status(cudaError_t err, const char* what);

class CudaDevice : public Device {
 public:
  // GPU `ordinal` of those visible, made current on the calling thread.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> open(int ordinal, MemoryAccountant& acct);
  ~CudaDevice() override;

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  Tier memory_tier() const override { return Tier::kGpu; }
  std::string description() const override { return name() + " (" + gpu_name_ + ")"; }
  bool holds(const void* p) const override;
  uint64_t usable_bytes() const override { return usable_; }
  bool pins_host_memory() const override { return true; }
  double peak_flops() const override { return peak_flops_; }
  absl::Status bind_thread() override;

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

 protected:
  void copy_bytes(Stream& s, void* dst, const void* src, uint64_t bytes) override;
  absl::Status host_wait(Stream& s) override;
  absl::Status host_wait(Event& e) override;

 private:
  class Raw : public RawMemory {
   public:
    absl::StatusOr<void*> alloc(uint64_t bytes) override;
    void free(void* p) override;
  };

  CudaDevice(int ordinal, std::string gpu_name, MemoryAccountant& acct);
  // Enqueue errors (a bad pointer, a stream of another device) are bugs of
  // the caller: they abort with CUDA's message.
  void check_enqueue(cudaError_t err, const char* what) const;

  int ordinal_;
  std::string gpu_name_;
  uint64_t usable_ = 0;
  double peak_flops_ = 0;
  Raw raw_;
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<CudaStream> compute_;
};

}  // namespace zerod
