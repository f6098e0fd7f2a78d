#include "runtime/core/cuda_device.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {
namespace {

class CudaEvent : public Event {
 public:
  explicit CudaEvent(cudaEvent_t e) : e_(e) {}
  ~CudaEvent() override { cudaEventDestroy(e_); }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_;
};

cudaEvent_t cuda_event(Event& e) { return static_cast<CudaEvent&>(e).get(); }

std::atomic<int> opened_device{-1};  // opened_cuda_device()

}  // namespace

absl::Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

CudaStream::~CudaStream() {
  cudaStreamSynchronize(s_);
  cudaStreamDestroy(s_);
}

int opened_cuda_device() { return opened_device.load(std::memory_order_relaxed); }

absl::StatusOr<void*> CudaDevice::Raw::alloc(uint64_t bytes) { return gpu_alloc(bytes); }
void CudaDevice::Raw::free(void* p) { gpu_free(p); }

CudaDevice::CudaDevice(int ordinal, std::string gpu_name, MemoryAccountant& acct)
    : Device(acct), ordinal_(ordinal), gpu_name_(std::move(gpu_name)) {
  allocator_ = std::make_unique<CachingAllocator>(Tier::kGpu, acct, raw_);
}

CudaDevice::~CudaDevice() {
  cudaSetDevice(ordinal_);
  compute_.reset();
  allocator_.reset();  // the model's buffers are gone by now
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::open(int ordinal, MemoryAccountant& acct) {
  const int n = cuda_device_count();
  if (ordinal < 0 || ordinal >= n) {
    return absl::InvalidArgumentError(absl::StrCat("no CUDA device ", ordinal, ": ", n, " visible"));
  }
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaDeviceProp prop{};
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  std::unique_ptr<CudaDevice> d(new CudaDevice(ordinal, prop.name, acct));
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, d->create_stream());
  // Free once the context is made: what this process's buffers can take.
  size_t free = 0, total = 0;
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaMemGetInfo(&free, &total), "cudaMemGetInfo"));
  d->usable_ = free;
  int clock_khz = 0;
  ZEROD_RETURN_IF_ERROR(
      cuda_status(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, ordinal), "cudaDeviceGetAttribute"));
  d->peak_flops_ = dense_16bit_peak_flops(prop.major, prop.minor, prop.multiProcessorCount, clock_khz * 1e3);
  d->compute_.reset(static_cast<CudaStream*>(s.release()));
  opened_device.store(ordinal, std::memory_order_relaxed);
  return d;
}

void CudaDevice::check_enqueue(cudaError_t err, const char* what) const {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "zerod: %s on %s failed: %s\n", what, name().c_str(), cudaGetErrorString(err));
  std::abort();
}

absl::StatusOr<Buffer> CudaDevice::allocate(uint64_t bytes, Category c) { return allocate(bytes, c, Tier::kGpu); }

absl::StatusOr<Buffer> CudaDevice::allocate(uint64_t bytes, Category c, Tier t) {
  if (t != Tier::kGpu) return Device::allocate(bytes, c, t);
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"));
  return allocator_->allocate(bytes, c);
}

bool CudaDevice::holds(const void* p) const {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // not an address CUDA knows: host memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

absl::Status CudaDevice::bind_thread() { return cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"); }

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::create_stream() {
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"));
  cudaStream_t s = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream.
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  return std::make_unique<CudaStream>(s);
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::create_event() {
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"));
  cudaEvent_t e = nullptr;
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  return std::make_unique<CudaEvent>(e);
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::create_timing_event() {
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(ordinal_), "cudaSetDevice"));
  cudaEvent_t e = nullptr;
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&e), "cudaEventCreate"));
  return std::make_unique<CudaEvent>(e);
}

absl::StatusOr<double> CudaDevice::elapsed_ms(Event& start, Event& end) {
  float ms = 0.0f;
  ZEROD_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&ms, cuda_event(start), cuda_event(end)), "cudaEventElapsedTime"));
  return double{ms};
}

void CudaDevice::memset(Stream& s, void* dst, int byte, uint64_t bytes) {
  if (bytes == 0) return;
  check_enqueue(cudaMemsetAsync(dst, byte, bytes, cuda_stream(s)), "cudaMemsetAsync");
}

void CudaDevice::copy_bytes(Stream& s, void* dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  check_enqueue(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream(s)), "cudaMemcpyAsync");
}

void CudaDevice::record(Stream& s, Event& e) {
  check_enqueue(cudaEventRecord(cuda_event(e), cuda_stream(s)), "cudaEventRecord");
}

void CudaDevice::wait(Stream& s, Event& e) {
  check_enqueue(cudaStreamWaitEvent(cuda_stream(s), cuda_event(e), 0), "cudaStreamWaitEvent");
}

absl::Status CudaDevice::host_wait(Stream& s) {
  return cuda_status(cudaStreamSynchronize(cuda_stream(s)), "work on the GPU failed");
}

absl::Status CudaDevice::host_wait(Event& e) {
  return cuda_status(cudaEventSynchronize(cuda_event(e)), "work on the GPU failed");
}

absl::StatusOr<std::unique_ptr<Device>> open_cuda_device(int ordinal, MemoryAccountant& acct) {
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> d, CudaDevice::open(ordinal, acct));
  return std::unique_ptr<Device>(std::move(d));
}

}  // namespace zerod
