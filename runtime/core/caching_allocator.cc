#include "runtime/core/caching_allocator.h"

#include "absl/strings/str_cat.h"

namespace zerod {

CachingAllocator::~CachingAllocator() { empty_cache(); }

uint64_t CachingAllocator::block_size(uint64_t bytes) {
  constexpr uint64_t kSmall = 512, kLarge = uint64_t{2} << 20, kSmallLimit = uint64_t{1} << 20;
  if (bytes == 0) return kSmall;
  const uint64_t unit = bytes < kSmallLimit ? kSmall : kLarge;
  return (bytes + unit - 1) / unit * unit;
}

absl::StatusOr<Buffer> CachingAllocator::allocate(uint64_t bytes, Category c) {
  const uint64_t size = block_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  if (auto it = cache_.find(size); it != cache_.end()) {
    ZEROD_RETURN_IF_ERROR(acct_.reserve(tier_, c, size));
    p = it->second;
    cache_.erase(it);
    cached_ -= size;
  } else {
    const uint64_t limit = acct_.limit(tier_);
    if (limit != 0 && held_ + size > limit) empty_cache_locked();
    ZEROD_RETURN_IF_ERROR(acct_.check(tier_, c, size));
    absl::StatusOr<void*> got = raw_.alloc(size);
    if (!got.ok() && cached_ > 0) {
      empty_cache_locked();
      got = raw_.alloc(size);
    }
    if (!got.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("allocating ", bytes, " bytes of ", category_name(c), " on ",
                                                       tier_name(tier_), " failed (", acct_.holdings(tier_),
                                                       "): ", got.status().message()));
    }
    if (absl::Status s = acct_.reserve(tier_, c, size); !s.ok()) {
      raw_.free(*got);  // another allocator took the room meanwhile
      return s;
    }
    p = *got;
    sizes_[static_cast<const char*>(p)] = size;
    held_ += size;
  }
  return Buffer::pooled(p, bytes, c, tier_, *this);
}

void CachingAllocator::give_back(void* p, Category c) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t size = sizes_.at(static_cast<const char*>(p));
  acct_.release(tier_, c, size);
  cache_.emplace(size, p);
  cached_ += size;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CachingAllocator::empty_cache_locked() {
  for (const auto& [size, p] : cache_) {
    raw_.free(p);
    sizes_.erase(static_cast<const char*>(p));
    held_ -= size;
  }
  cache_.clear();
  cached_ = 0;
}

bool CachingAllocator::holds(const void* p) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sizes_.upper_bound(c);
  if (it == sizes_.begin()) return false;
  --it;
  return c < it->first + it->second;
}

uint64_t CachingAllocator::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

uint64_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace zerod
