// Every allocation goes through one MemoryAccountant, tagged with what it holds
// (category) and where it lives (tier). It tracks current and peak bytes per
// (tier, category), peak bytes per tier, and refuses allocations past a limit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "runtime/core/status.h"

namespace zerod {

enum class Tier : uint8_t { kGpu, kPinned, kHost, kNvme };
enum class Category : uint8_t {
  kParams, kGrads, kOptimizer, kActivations, kComm, kOffload, kWorkspace,
  kFrozen  // weights that are not trained (LoRA's base)
};
inline constexpr int kNumTiers = 4;
inline constexpr int kNumCategories = 8;

// Names used in the run output ("gpu", "params", ...).
const char* tier_name(Tier t);
const char* category_name(Category c);

// A snapshot of the peaks, as one rank sends it to another.
struct MemoryPeaks {
  std::array<std::array<uint64_t, kNumCategories>, kNumTiers> peak{};
  std::array<uint64_t, kNumTiers> total{};  // peak of each tier's sum
  // The host's memory, pageable and pinned.
  uint64_t host_total() const {
    return total[static_cast<int>(Tier::kHost)] + total[static_cast<int>(Tier::kPinned)];
  }
};

class MemoryAccountant {
 public:
  // The process-wide accountant that Buffer uses by default.
  static MemoryAccountant& global();

  // Records `bytes` as allocated; fails (recording nothing) past the tier limit.
  absl::Status reserve(Tier t, Category c, uint64_t bytes);
  // The error reserve() would give now, recording nothing.
  absl::Status check(Tier t, Category c, uint64_t bytes) const;
  void release(Tier t, Category c, uint64_t bytes);

  // 0 means no limit. The host's limit holds its pinned memory too, which
  // has none of its own.
  void set_limit(Tier t, uint64_t bytes);
  uint64_t limit(Tier t) const;

  uint64_t current(Tier t, Category c) const;
  uint64_t peak(Tier t, Category c) const;
  uint64_t current_total(Tier t) const;
  uint64_t peak_total(Tier t) const;
  MemoryPeaks peaks() const;
  // "N bytes in use: params A, grads B, ...", for errors about tier t.
  std::string holdings(Tier t) const;
  // Peaks restart from the current values (used between runs in one process).
  void reset_peaks();

 private:
  absl::Status past_limit(Tier t, Category c, uint64_t bytes) const;

  mutable std::mutex mu_;
  std::array<std::array<uint64_t, kNumCategories>, kNumTiers> current_{};
  std::array<std::array<uint64_t, kNumCategories>, kNumTiers> peak_{};
  std::array<uint64_t, kNumTiers> total_{};
  std::array<uint64_t, kNumTiers> peak_total_{};
  std::array<uint64_t, kNumTiers> limit_{};
};

// Where a pooled Buffer's memory goes back on reset, instead of being freed:
// a caching allocator, which accounts its blocks itself.
class BufferPool {
 public:
  virtual ~BufferPool() = default;
  virtual void give_back(void* p, Category c) = 0;
};

// Buffers of at least this many bytes start on a page boundary, as direct
// file I/O needs.
inline constexpr uint64_t kPageBytes = 4096;

// part(at, n) over [0, bytes) in parts of `part_bytes`, over the OpenMP
// team where there are 8 or more.
void for_each_part(uint64_t bytes, uint64_t part_bytes, const std::function<void(uint64_t at, uint64_t n)>& part);
// memcpy of host memory in 1 MiB parts over the OpenMP team, where it is
// large: one thread does not reach the memory's bandwidth.
void parallel_copy(void* dst, const void* src, uint64_t bytes);
// memset likewise; the first touch of fresh pages, on every thread.
void parallel_fill(void* dst, int byte, uint64_t bytes);

// An owning, move-only, 64-byte aligned allocation on one tier (a page
// from 4 KiB up). GPU and pinned buffers need a CUDA build; pinned ones
// come zeroed, their registration with CUDA perhaps still under way
// (runtime/core/pinned_host.h). NVMe space is recorded by the offload engine through
// reserve()/release() rather than allocated here.
class Buffer {
 public:
  Buffer() = default;
  static absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c, Tier t = Tier::kHost,
                                         MemoryAccountant& acct = MemoryAccountant::global());
  // `bytes` at p, a block of `pool`'s, which takes it back on reset.
  static Buffer pooled(void* p, uint64_t bytes, Category c, Tier t, BufferPool& pool);
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset();
  // The address in the buffer's own tier: what the Device and the kernel
  // table take (a device address for kGpu).
  void* data() const { return data_; }
  template <class T>
  T* ptr() const { return static_cast<T*>(data_); }
  // For host code: host and pinned buffers only; a GPU buffer's address
  // cannot be dereferenced here, and asking for it is a bug (it aborts).
  template <class T>
  T* host() const {
    if (tier_ == Tier::kGpu || device_only_) abort_not_host();
    return static_cast<T*>(data_);
  }
  // From now on host() aborts for this buffer too, as for GPU memory: the
  // CPU device's test mode that stands in for a GPU.
  void set_device_only() { device_only_ = true; }
  uint64_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  Category category() const { return category_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  Tier tier_ = Tier::kHost;
  Category category_ = Category::kWorkspace;
  MemoryAccountant* acct_ = nullptr;
  BufferPool* pool_ = nullptr;
  bool device_only_ = false;

  [[noreturn]] void abort_not_host() const;
};

// Parses a byte size: a non-negative integer, or a string such as "512MiB",
// "12GiB", "1.5GB", "4096".
absl::StatusOr<uint64_t> parse_byte_size(std::string_view text);
// The process's peak resident memory (VmHWM in /proc/self/status); 0 where
// it cannot be read.
uint64_t resident_peak_bytes();
// Bytes for people: "-" for none, "512 B", "1.5 GiB".
std::string byte_size_text(uint64_t bytes);

}  // namespace zerod
