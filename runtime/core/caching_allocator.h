// Device memory through a cache of freed blocks. cudaMalloc and cudaFree
// synchronize the whole device and take milliseconds, while a trainer frees
// and asks again for the same sizes every step; so freed blocks wait in a
// cache for the next request of their size.
//
// Every block handed out is reserved in the accountant under its category,
// at its block size (the request rounded up). The tier's limit in the
// accountant caps what the allocator holds, blocks in use and cached
// together: a new block that would pass it empties the cache first, and a
// request that still does not fit fails naming its category, the bytes
// wanted and what each category holds, as does one the device itself
// cannot meet.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "runtime/core/memory.h"

namespace zerod {

// Where the blocks come from: cudaMalloc on a GPU, a fake device in tests.
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual absl::StatusOr<void*> alloc(uint64_t bytes) = 0;
  virtual void free(void* p) = 0;
};

class CachingAllocator final : public BufferPool {
 public:
  CachingAllocator(Tier tier, MemoryAccountant& acct, RawMemory& raw) : tier_(tier), acct_(acct), raw_(raw) {}
  // Frees the cache; every Buffer it handed out must be gone by then.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  absl::StatusOr<Buffer> allocate(uint64_t bytes, Category c);
  void give_back(void* p, Category c) override;
  // Returns every cached block to the device.
  void empty_cache();

  // Whether p lies in a block taken from the device (in use or cached).
  bool holds(const void* p) const;
  // Bytes of blocks taken from the device: in use plus cached.
  uint64_t held_bytes() const;
  uint64_t cached_bytes() const;
  // Requests are rounded up to 512 bytes below 1 MiB, to 2 MiB above, so
  // that sizes that differ a little share blocks.
  static uint64_t block_size(uint64_t bytes);

 private:
  void empty_cache_locked();

  const Tier tier_;
  MemoryAccountant& acct_;
  RawMemory& raw_;
  mutable std::mutex mu_;
  std::multimap<uint64_t, void*> cache_;       // free blocks by size
  std::map<const char*, uint64_t> sizes_;     // every block held, by address
  uint64_t held_ = 0, cached_ = 0;
};

}  // namespace zerod
