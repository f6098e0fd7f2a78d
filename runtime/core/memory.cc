#include "runtime/core/memory.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/pinned_host.h"

namespace zerod {

const char* tier_name(Tier t) {
  static constexpr const char* kNames[] = {"gpu", "pinned", "host", "nvme"};
  return kNames[static_cast<int>(t)];
}

const char* category_name(Category c) {
  static constexpr const char* kNames[] = {"params", "grads",   "optimizer", "activations",
                                                "comm",   "offload", "workspace", "frozen"};
  return kNames[static_cast<int>(c)];
}

MemoryAccountant& MemoryAccountant::global() {
  static MemoryAccountant acct;
  return acct;
}

namespace {

std::string describe_holdings(uint64_t in_use, const std::array<uint64_t, kNumCategories>& held) {
  std::string s = absl::StrCat(in_use, " bytes in use");
  const char* sep = ": ";
  for (int i = 0; i < kNumCategories; ++i) {
    if (held[i] == 0) continue;
    absl::StrAppend(&s, sep, category_name(static_cast<Category>(i)), " ", held[i]);
    sep = ", ";
  }
  return s;
}

// The tier whose limit an allocation on t counts against: pinned memory is
// the host's, page-locked.
Tier limited_as(Tier t) { return t == Tier::kPinned ? Tier::kHost : t; }

}  // namespace

// Under the lock. Names what wanted the room and what holds the limit's
// memory already, by category.
absl::Status MemoryAccountant::past_limit(Tier t, Category c, uint64_t bytes) const {
  const Tier lt = limited_as(t);
  const int li = static_cast<int>(lt);
  if (limit_[li] == 0) return absl::OkStatus();
  uint64_t in_use = 0;
  std::array<uint64_t, kNumCategories> held{};
  for (Tier each : {Tier::kGpu, Tier::kPinned, Tier::kHost, Tier::kNvme}) {
    if (limited_as(each) != lt) continue;
    const int ti = static_cast<int>(each);
    in_use += total_[ti];
    for (int ci = 0; ci < kNumCategories; ++ci) held[ci] += current_[ti][ci];
  }
  if (in_use + bytes <= limit_[li]) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("allocating ", bytes, " bytes of ", category_name(c), " on ", tier_name(t), " would exceed the ",
                   tier_name(lt), " memory limit of ", limit_[li], " bytes (",
                   lt != t || total_[static_cast<int>(Tier::kPinned)] > 0 ? "pinned memory included; " : "",
                   describe_holdings(in_use, held), ")"));
}

absl::Status MemoryAccountant::check(Tier t, Category c, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return past_limit(t, c, bytes);
}

absl::Status MemoryAccountant::reserve(Tier t, Category c, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ZEROD_RETURN_IF_ERROR(past_limit(t, c, bytes));
  const int ti = static_cast<int>(t), ci = static_cast<int>(c);
  current_[ti][ci] += bytes;
  total_[ti] += bytes;
  if (current_[ti][ci] > peak_[ti][ci]) peak_[ti][ci] = current_[ti][ci];
  if (total_[ti] > peak_total_[ti]) peak_total_[ti] = total_[ti];
  return absl::OkStatus();
}

void MemoryAccountant::release(Tier t, Category c, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const int ti = static_cast<int>(t), ci = static_cast<int>(c);
  current_[ti][ci] -= bytes;
  total_[ti] -= bytes;
}

void MemoryAccountant::set_limit(Tier t, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_[static_cast<int>(t)] = bytes;
}

uint64_t MemoryAccountant::limit(Tier t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_[static_cast<int>(t)];
}

uint64_t MemoryAccountant::current(Tier t, Category c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_[static_cast<int>(t)][static_cast<int>(c)];
}

uint64_t MemoryAccountant::peak(Tier t, Category c) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(t)][static_cast<int>(c)];
}

uint64_t MemoryAccountant::current_total(Tier t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_[static_cast<int>(t)];
}

uint64_t MemoryAccountant::peak_total(Tier t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_total_[static_cast<int>(t)];
}

MemoryPeaks MemoryAccountant::peaks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {peak_, peak_total_};
}

std::string MemoryAccountant::holdings(Tier t) const {
  std::lock_guard<std::mutex> lock(mu_);
  return describe_holdings(total_[static_cast<int>(t)], current_[static_cast<int>(t)]);
}

void MemoryAccountant::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = current_;
  peak_total_ = total_;
}

void for_each_part(uint64_t bytes, uint64_t part_bytes, const std::function<void(uint64_t at, uint64_t n)>& part) {
  const int64_t parts = static_cast<int64_t>((bytes + part_bytes - 1) / part_bytes);
#pragma omp parallel for schedule(static) if (parts >= 8)
  for (int64_t i = 0; i < parts; ++i) {
    const uint64_t at = i * part_bytes;
    part(at, std::min(part_bytes, bytes - at));
  }
}

namespace {

constexpr uint64_t kPart = uint64_t{1} << 20;

}  // namespace

void parallel_copy(void* dst, const void* src, uint64_t bytes) {
  for_each_part(bytes, kPart, [&](uint64_t at, uint64_t n) {
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, n);
  });
}

void parallel_fill(void* dst, int byte, uint64_t bytes) {
  for_each_part(bytes, kPart, [&](uint64_t at, uint64_t n) { std::memset(static_cast<char*>(dst) + at, byte, n); });
}

absl::StatusOr<Buffer> Buffer::allocate(uint64_t bytes, Category c, Tier t, MemoryAccountant& acct) {
  if (t == Tier::kNvme) {
    return absl::InvalidArgumentError("NVMe space is not allocated as a memory buffer");
  }
  // Check, allocate, then record: a failed allocation leaves no trace in the peaks.
  ZEROD_RETURN_IF_ERROR(acct.check(t, c, bytes));
  const uint64_t align = bytes >= kPageBytes ? kPageBytes : 64;
  const uint64_t rounded = (bytes + align - 1) / align * align;
  absl::StatusOr<void*> p;
  if (t == Tier::kHost) {
    void* q = rounded ? std::aligned_alloc(align, rounded) : nullptr;
    if (rounded && !q) {
      p = absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
    } else {
      p = q;
    }
  } else if (t == Tier::kPinned) {
    p = allocate_pinned(rounded);
  } else {
    p = gpu_alloc(rounded);
  }
  if (!p.ok()) return p.status();
  Buffer b;
  b.data_ = *p;
  b.bytes_ = bytes;
  b.tier_ = t;
  b.category_ = c;
  if (absl::Status s = acct.reserve(t, c, bytes); !s.ok()) {
    return s;  // another thread took the room meanwhile; b frees itself, unrecorded
  }
  b.acct_ = &acct;
  return b;
}

Buffer Buffer::pooled(void* p, uint64_t bytes, Category c, Tier t, BufferPool& pool) {
  Buffer b;
  b.data_ = p;
  b.bytes_ = bytes;
  b.tier_ = t;
  b.category_ = c;
  b.pool_ = &pool;
  return b;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    tier_ = o.tier_;
    category_ = o.category_;
    acct_ = o.acct_;
    pool_ = o.pool_;
    device_only_ = o.device_only_;
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.acct_ = nullptr;
    o.pool_ = nullptr;
  }
  return *this;
}

void Buffer::reset() {
  if (data_ && pool_) {
    pool_->give_back(data_, category_);
  } else if (data_) {
    if (tier_ == Tier::kHost) {
      std::free(data_);
    } else if (tier_ == Tier::kPinned) {
      free_pinned(data_);
    } else {
      gpu_free(data_);
    }
  }
  if (acct_) acct_->release(tier_, category_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
  acct_ = nullptr;
  pool_ = nullptr;
  device_only_ = false;
}

void Buffer::abort_not_host() const {
  std::fprintf(stderr, "zerod: host access to a %llu-byte %s buffer in %s memory\n",
               static_cast<unsigned long long>(bytes_), category_name(category_),
               device_only_ ? "device-only" : "GPU");
  std::abort();
}

absl::StatusOr<uint64_t> parse_byte_size(std::string_view text) {
  std::string s(absl::StripAsciiWhitespace(std::string(text)));
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"B", 1.0}};
  double mult = 1.0;
  for (const auto& [suffix, m] : kUnits) {
    if (s.size() > suffix.size() && s.ends_with(suffix)) {
      mult = m;
      s = std::string(absl::StripAsciiWhitespace(s.substr(0, s.size() - suffix.size())));
      break;
    }
  }
  double v = 0;
  // 2^63 bytes is past any machine and past what llround can return.
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v < 0 || v * mult >= 0x1p63) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(text), "' is not a byte size (expected e.g. 4096, \"512MiB\", \"12GiB\")"));
  }
  return static_cast<uint64_t>(std::llround(v * mult));
}

uint64_t resident_peak_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    uint64_t kib = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %" SCNu64 " kB", &kib) == 1) return kib * 1024;
  }
  return 0;
}

std::string byte_size_text(uint64_t bytes) {
  if (bytes == 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%d B", bytes) : absl::StrFormat("%.1f %s", v, units[u]);
}

}  // namespace zerod
