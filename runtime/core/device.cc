#include "runtime/core/device.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/pinned_host.h"
#include "runtime/core/profiler.h"

namespace zerod {

absl::StatusOr<Buffer> Device::allocate(uint64_t bytes, Category c, Tier t) {
  return Buffer::allocate(bytes, c, t, *acct_);
}

void Device::copy(Stream& s, void* dst, const void* src, uint64_t bytes) {
  // A device that copies from pinned memory waits for its registration,
  // which may still be under way (runtime/core/pinned_host.h). Memory whose
  // registration failed is still host memory, copied at pageable speed (the
  // failure was reported when it happened).
  if (pins_host_memory()) {
    await_pinned(dst, bytes).IgnoreError();
    await_pinned(src, bytes).IgnoreError();
  }
  if (!profiler_) return copy_bytes(s, dst, src, bytes);
  // "device" is memory host code cannot reach (a GPU's); the rest is host memory.
  const char* what = holds(src) ? (holds(dst) ? "copy device->device" : "copy device->host")
                                : (holds(dst) ? "copy host->device" : "copy host->host");
  auto span = Profiler::device_span(profiler_, s, what, bytes);
  copy_bytes(s, dst, src, bytes);
}

absl::Status Device::synchronize(Stream& s) {
  return timed_wait([&] { return host_wait(s); });
}

absl::Status Device::synchronize(Event& e) {
  return timed_wait([&] { return host_wait(e); });
}

absl::Status Device::timed_wait(const std::function<absl::Status()>& wait) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = wait();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  waits_.fetch_add(1, std::memory_order_relaxed);
  wait_ns_.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  return s;
}

Device::HostWaits Device::host_waits() const {
  return {waits_.load(std::memory_order_relaxed), static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) * 1e-9};
}

namespace {

// Host staging for memory that is not host-visible, a part at a time.
constexpr uint64_t kStagingBytes = uint64_t{4} << 20;

}  // namespace

uint64_t Device::host_staging_bytes(uint64_t bytes) { return std::min(bytes, kStagingBytes); }

absl::Status Device::read_on_host(Stream& s, const void* src, uint64_t bytes, const HostPart& part) {
  ZEROD_RETURN_IF_ERROR(synchronize(s));
  if (bytes == 0) return absl::OkStatus();
  if (host_visible()) return part(const_cast<void*>(src), 0, bytes);
  ZEROD_ASSIGN_OR_RETURN(Buffer staging, allocate(host_staging_bytes(bytes), Category::kWorkspace, Tier::kHost));
  for (uint64_t offset = 0; offset < bytes; offset += staging.bytes()) {
    const uint64_t n = std::min(staging.bytes(), bytes - offset);
    copy(s, staging.data(), static_cast<const char*>(src) + offset, n);
    ZEROD_RETURN_IF_ERROR(synchronize(s));
    ZEROD_RETURN_IF_ERROR(part(staging.host<char>(), offset, n));
  }
  return absl::OkStatus();
}

absl::Status Device::write_from_host(Stream& s, void* dst, uint64_t bytes, const HostPart& part) {
  ZEROD_RETURN_IF_ERROR(synchronize(s));
  if (bytes == 0) return absl::OkStatus();
  if (host_visible()) return part(dst, 0, bytes);
  ZEROD_ASSIGN_OR_RETURN(Buffer staging, allocate(host_staging_bytes(bytes), Category::kWorkspace, Tier::kHost));
  for (uint64_t offset = 0; offset < bytes; offset += staging.bytes()) {
    const uint64_t n = std::min(staging.bytes(), bytes - offset);
    ZEROD_RETURN_IF_ERROR(part(staging.host<char>(), offset, n));
    copy(s, static_cast<char*>(dst) + offset, staging.data(), n);
    ZEROD_RETURN_IF_ERROR(synchronize(s));  // before the staging is filled again
  }
  return absl::OkStatus();
}

// A CPU device that stands in for a GPU has gpu-tier memory but no CUDA
// device to pin memory with.
bool is_cuda_device(const Device& device) {
  return device.memory_tier() == Tier::kGpu && !dynamic_cast<const CpuDevice*>(&device);
}

PlanDevice plan_device(const Device& device) {
  // What it can hold: its free memory, or less under the accountant's cap.
  uint64_t usable = device.usable_bytes();
  const uint64_t cap = device.accountant().limit(device.memory_tier());
  if (cap > 0 && (usable == 0 || cap < usable)) usable = cap;
  return {device.memory_tier(), device.pins_host_memory(), device.memory_tier() == Tier::kGpu, usable};
}

absl::StatusOr<Buffer> allocate_spec(Device& device, const BufferSpec& b) {
  return b.tier ? device.allocate(b.bytes, b.category, *b.tier) : device.allocate(b.bytes, b.category);
}

Tier staging_tier(const Device& device) { return plan_device(device).staging_tier(); }

double dense_16bit_peak_flops(int major, int minor, int sms, double clock_hz) {
  struct Part {
    int major, minor, sms;
    double flops;
  };
  // Datasheet figures, which are at the tensor cores' sustained clock
  // rather than the highest boost the driver reports.
  constexpr Part kParts[] = {
      {9, 0, 132, 989.4e12},  // H100 SXM, H200
      {9, 0, 114, 756.5e12},  // H100 PCIe
      {8, 0, 108, 312e12},    // A100
  };
  for (const Part& p : kParts) {
    if (p.major == major && p.minor == minor && p.sms == sms) return p.flops;
  }
  // Dense bf16 FLOPs a clock per SM, fp32 accumulation.
  const double per_sm_clock = major == 9 && minor == 0 ? 4096 : major == 8 && minor == 0 ? 2048 : 0;
  return per_sm_clock * sms * clock_hz;
}

absl::StatusOr<std::unique_ptr<Device>> open_device(std::string_view name, int local_rank, MemoryAccountant& acct) {
  if (name != "cpu" && name != "cuda" && name != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("run.device: unknown device '", std::string(name), "' (expected cpu, cuda or auto)"));
  }
  // A CPU run does not ask CUDA anything: that alone opens the driver.
  if (name == "cpu") return std::make_unique<CpuDevice>(acct);
  const int gpus = cuda_device_count();
  if (name == "auto" && gpus == 0) return std::make_unique<CpuDevice>(acct);
#ifndef ZEROD_WITH_CUDA
  return absl::FailedPreconditionError(
      "run.device 'cuda': zerod was built without CUDA (ZEROD_WITH_CUDA=OFF); use 'cpu' or 'auto'");
#else
  if (gpus == 0) {
    return absl::FailedPreconditionError(
        "run.device 'cuda': no CUDA device is visible on this machine (cudaGetDeviceCount reports none); use "
        "'cpu' or 'auto'");
  }
  if (local_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("run.device '", std::string(name), "': local rank ", local_rank,
                                                   " is not a place on this machine"));
  }
  // More ranks than GPUs share them round-robin (their collectives then go
  // through host staging: see make_device_communicator).
  return open_cuda_device(local_rank % gpus, acct);
#endif
}

}  // namespace zerod
