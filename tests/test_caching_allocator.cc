// The caching allocator behind a fake device: blocks are reused by size,
// every block in use is accounted by category at its block size, the tier
// limit caps in-use plus cached bytes, and what cannot be had fails naming
// the category, the bytes and what each category holds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "runtime/core/caching_allocator.h"

namespace zerod {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A device of `capacity` bytes that counts its mallocs and frees.
class FakeDevice : public RawMemory {
 public:
  explicit FakeDevice(uint64_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks never freed"; }
  absl::StatusOr<void*> alloc(uint64_t bytes) override {
    if (used_ + bytes > capacity_) return absl::ResourceExhaustedError("out of memory");
    void* p = std::aligned_alloc(512, bytes);
    used_ += bytes;
    live_[p] = bytes;
    ++mallocs;
    return p;
  }
  void free(void* p) override {
    auto it = live_.find(p);
    ASSERT_NE(it, live_.end()) << "free of a block never allocated";
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
    ++frees;
  }
  uint64_t used() const { return used_; }
  int mallocs = 0, frees = 0;

 private:
  uint64_t capacity_, used_ = 0;
  std::map<void*, uint64_t> live_;
};

TEST(CachingAllocator, RoundsSmallRequestsTo512BytesAndLargeOnesTo2MiB) {
  EXPECT_EQ(CachingAllocator::block_size(0), 512u);
  EXPECT_EQ(CachingAllocator::block_size(1), 512u);
  EXPECT_EQ(CachingAllocator::block_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::block_size(kMiB - 1), kMiB);
  EXPECT_EQ(CachingAllocator::block_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::block_size(5 * kMiB + 1), 6 * kMiB);
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameSizeAndAccountsItsNewCategory) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct;
  CachingAllocator alloc(Tier::kGpu, acct, dev);
  void* first = nullptr;
  {
    auto b = alloc.allocate(3 * kMiB, Category::kActivations);
    ASSERT_TRUE(b.ok()) << b.status();
    first = b->data();
    EXPECT_EQ(b->bytes(), 3 * kMiB);
    EXPECT_EQ(b->tier(), Tier::kGpu);
    EXPECT_EQ(acct.current(Tier::kGpu, Category::kActivations), 4 * kMiB);
    EXPECT_EQ(alloc.held_bytes(), 4 * kMiB);
  }
  EXPECT_EQ(acct.current(Tier::kGpu, Category::kActivations), 0u);
  EXPECT_EQ(alloc.cached_bytes(), 4 * kMiB);
  EXPECT_EQ(dev.frees, 0);
  // 3.5 MiB rounds to the same 4 MiB block: no new malloc.
  auto b = alloc.allocate(3 * kMiB + kMiB / 2, Category::kWorkspace);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data(), first);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(acct.current(Tier::kGpu, Category::kWorkspace), 4 * kMiB);
  EXPECT_EQ(acct.peak(Tier::kGpu, Category::kActivations), 4 * kMiB);
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  // A different size takes a block of its own.
  auto c = alloc.allocate(100, Category::kParams);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(acct.current(Tier::kGpu, Category::kParams), 512u);
  EXPECT_EQ(acct.current_total(Tier::kGpu), 4 * kMiB + 512);
}

TEST(CachingAllocator, TheLimitCapsBlocksInUseAndCachedTogether) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct;
  acct.set_limit(Tier::kGpu, 10 * kMiB);
  CachingAllocator alloc(Tier::kGpu, acct, dev);
  { auto a = alloc.allocate(6 * kMiB, Category::kActivations); ASSERT_TRUE(a.ok()); }
  EXPECT_EQ(alloc.cached_bytes(), 6 * kMiB);
  // 6 MiB cached + 4 MiB new fits exactly; 6 + 6 would not, so the cache goes first.
  auto b = alloc.allocate(4 * kMiB, Category::kGrads);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(alloc.cached_bytes(), 6 * kMiB);
  b->reset();
  auto c = alloc.allocate(8 * kMiB, Category::kParams);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  EXPECT_EQ(dev.used(), 8 * kMiB);
  EXPECT_LE(alloc.held_bytes(), acct.limit(Tier::kGpu));
}

TEST(CachingAllocator, PastTheLimitFailsNamingTheCategoryTheBytesAndWhatEachCategoryHolds) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct;
  acct.set_limit(Tier::kGpu, 10 * kMiB);
  CachingAllocator alloc(Tier::kGpu, acct, dev);
  auto params = alloc.allocate(4 * kMiB, Category::kParams);
  auto grads = alloc.allocate(2 * kMiB, Category::kGrads);
  ASSERT_TRUE(params.ok() && grads.ok());
  auto acts = alloc.allocate(6 * kMiB, Category::kActivations);
  ASSERT_FALSE(acts.ok());
  EXPECT_EQ(acts.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(acts.status().message(),
            "allocating 6291456 bytes of activations on gpu would exceed the gpu memory limit of 10485760 bytes "
            "(6291456 bytes in use: params 4194304, grads 2097152)");
  // Nothing changed: no block taken, nothing recorded, the peaks as before.
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(acct.current_total(Tier::kGpu), 6 * kMiB);
  EXPECT_EQ(acct.peak(Tier::kGpu, Category::kActivations), 0u);
  EXPECT_EQ(acct.peak_total(Tier::kGpu), 6 * kMiB);
}

TEST(CachingAllocator, ADeviceOutOfMemoryEmptiesTheCacheAndRetriesThenFailsNamingTheHoldings) {
  FakeDevice dev(8 * kMiB);  // no limit in the accountant: the device itself runs out
  MemoryAccountant acct;
  CachingAllocator alloc(Tier::kGpu, acct, dev);
  { auto a = alloc.allocate(6 * kMiB, Category::kActivations); ASSERT_TRUE(a.ok()); }
  auto b = alloc.allocate(4 * kMiB, Category::kParams);  // fits only once the 6 MiB block is freed
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(dev.frees, 1);
  auto c = alloc.allocate(6 * kMiB, Category::kOptimizer);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "allocating 6291456 bytes of optimizer on gpu failed (4194304 bytes in use: params 4194304): "
            "out of memory");
  EXPECT_EQ(acct.current(Tier::kGpu, Category::kOptimizer), 0u);
}

TEST(CachingAllocator, EmptyCacheReturnsEveryFreeBlockAndKeepsThoseInUse) {
  FakeDevice dev(64 * kMiB);
  MemoryAccountant acct;
  CachingAllocator alloc(Tier::kGpu, acct, dev);
  auto keep = alloc.allocate(1000, Category::kParams);
  { auto a = alloc.allocate(2000, Category::kGrads); auto b = alloc.allocate(3 * kMiB, Category::kGrads); }
  EXPECT_EQ(alloc.cached_bytes(), 2048 + 4 * kMiB);
  alloc.empty_cache();
  EXPECT_EQ(dev.frees, 2);
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  EXPECT_EQ(alloc.held_bytes(), 1024u);
  EXPECT_EQ(dev.used(), 1024u);
  EXPECT_EQ(acct.current_total(Tier::kGpu), 1024u);
}

}  // namespace
}  // namespace zerod
