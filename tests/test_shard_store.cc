// ShardStore against a plain array: what is put and added through its
// window, with reads ahead interleaved as the gradient and parameter stores
// issue them, is what acquire() reads back, in host memory (its record
// itself) and in a file;
// and a unit's read or write never goes to the file while a write-back of
// that unit is still in flight (io_uring does not order them).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "offload/shard_store.h"
#include "tests/temp_dir.h"

namespace zerod {
namespace {

// The embeddings' chunk (larger than the window) and three layers'.
const std::vector<int64_t> kChunks = {3000, 1000, 1000, 1000};
constexpr int64_t kWindow = 1000;

class ShardStoreTest : public testing::TempDirTest {
 protected:
  ShardStoreSettings settings(OffloadDevice device, IoFaultHook hook = {}) {
    ShardStoreSettings s;
    s.device = device;
    s.category = Category::kGrads;
    s.file = path("store");
    s.buffer_count = 3;
    s.host_tier = Tier::kHost;
    s.hook = std::move(hook);
    s.accountant = &accountant_;
    return s;
  }
  MemoryAccountant accountant_;
};

// Records every transfer's byte range as the engine takes it and as it
// completes, and counts a transfer taken while a write overlapping it is
// in flight.
class OrderCheck {
 public:
  IoFaultHook hook() {
    IoFaultHook h;
    h.on_submit = [this](bool write, const std::string&, uint64_t offset, uint64_t bytes) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [start, end] : writing_) {
        if (offset < end && start < offset + bytes) ++overlaps_;
      }
      if (write) writing_.emplace(offset, offset + bytes);
    };
    h.on_complete = [this](bool write, const std::string&, uint64_t offset, uint32_t len, int result) {
      // A write slow to finish: a transfer of the same unit taken
      // meanwhile is one that did not wait for it.
      if (write) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = writing_.find(offset); it != writing_.end() && it->second == offset + len) writing_.erase(it);
      }
      return result;
    };
    return h;
  }
  int overlaps() {
    std::lock_guard<std::mutex> lock(mu_);
    return overlaps_;
  }

 private:
  std::mutex mu_;
  std::multimap<uint64_t, uint64_t> writing_;  // start -> end
  int overlaps_ = 0;
};

// Rounds of adds as the gradient store makes them (each unit once a round,
// in a random order, read ahead before it is added to), a round starting
// from zeros now and then, and puts as the parameter store makes them;
// after each round every unit reads back as the array kept beside it.
void check_against_array(ShardStore& store, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  const int units = static_cast<int>(kChunks.size());
  std::vector<int64_t> offsets(units);
  std::exclusive_scan(kChunks.begin(), kChunks.end(), offsets.begin(), int64_t{0});
  std::vector<float> want(offsets.back() + kChunks.back(), 0.0f);
  std::vector<int> order(units);
  std::iota(order.begin(), order.end(), 0);
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(round);
    std::shuffle(order.begin(), order.end(), rng);
    const int kind = round == 0 ? 0 : static_cast<int>(rng() % 3);  // 0: onto zero, 1: add, 2: put
    for (int u : order) {
      ASSERT_TRUE(store.fetch(static_cast<int>(rng() % units)).ok());
      if (kind == 1) {
        ASSERT_TRUE(store.fetch(u).ok());
      }
      std::vector<float> src(kChunks[u]);
      for (float& x : src) x = value(rng);
      float* w = want.data() + offsets[u];
      for (size_t i = 0; i < src.size(); ++i) w[i] = kind == 1 ? w[i] + src[i] : src[i];
      // A unit comes in two calls, as one segment after another.
      const int64_t half = kChunks[u] / 2;
      for (auto [start, n] : {std::pair{int64_t{0}, half}, std::pair{half, kChunks[u] - half}}) {
        const absl::Status s = kind == 2 ? store.put(offsets[u] + start, src.data() + start, n)
                                         : store.add(offsets[u] + start, src.data() + start, DType::kF32, n, kind == 0);
        ASSERT_TRUE(s.ok()) << s;
      }
    }
    ASSERT_TRUE(store.flush().ok());
    for (int u = 0; u < units; ++u) {
      if (u + 1 < units) {
        ASSERT_TRUE(store.fetch(u + 1).ok());
      }
      auto got = store.acquire(u);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(0, std::memcmp(*got, want.data() + offsets[u], kChunks[u] * sizeof(float))) << "unit " << u;
      store.release(u);
    }
    ASSERT_TRUE(store.drop().ok());
  }
}

TEST_F(ShardStoreTest, HostMemoryReadsBackWhatWasPutAndAdded) {
  auto store = ShardStore::create(kChunks, kWindow, DType::kF32, settings(OffloadDevice::kCpu));
  ASSERT_TRUE(store.ok()) << store.status();
  check_against_array(**store, 1);
}

// In host memory a unit is read where its record is, not copied through
// the window: a writer over the same records is handed the same memory,
// which shows what the writer put once flushed; a unit still being filled
// is written to its record before it is handed out.
TEST_F(ShardStoreTest, HostMemoryIsReadInItsRecord) {
  auto store = ShardStore::create(kChunks, kWindow, DType::kF32, settings(OffloadDevice::kCpu));
  ASSERT_TRUE(store.ok()) << store.status();
  auto writer = (*store)->writer(2);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::vector<float> threes(kWindow, 3.0f), fives(kWindow, 5.0f);
  ASSERT_TRUE((*writer)->put(3000, threes.data(), kWindow).ok());  // unit 1
  ASSERT_TRUE((*writer)->flush().ok());
  auto mine = (*store)->acquire(1), theirs = (*writer)->acquire(1);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_EQ(*mine, *theirs);
  EXPECT_EQ(0, std::memcmp(*mine, threes.data(), kWindow * sizeof(float)));
  (*store)->release(1);
  (*writer)->release(1);
  ASSERT_TRUE((*store)->put(4000, fives.data(), kWindow).ok());  // unit 2, not flushed
  auto two = (*store)->acquire(2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(0, std::memcmp(*two, fives.data(), kWindow * sizeof(float)));
  auto two_again = (*writer)->acquire(2);
  ASSERT_TRUE(two_again.ok());
  EXPECT_EQ(*two, *two_again);
}

TEST_F(ShardStoreTest, FileReadsBackWhatWasPutAndAddedWithNoTransferOverlappingAWrite) {
  OrderCheck order;
  auto store = ShardStore::create(kChunks, kWindow, DType::kF32, settings(OffloadDevice::kNvme, order.hook()));
  ASSERT_TRUE(store.ok()) << store.status();
  check_against_array(**store, 2);
  store->reset();
  EXPECT_EQ(order.overlaps(), 0);
}

// The case that once went wrong, alone: units 1-3 written from the three
// buffers in turn, then unit 2 read ahead while its write was in flight,
// into the buffer unit 1's write had left.
TEST_F(ShardStoreTest, AReadAheadWaitsForTheUnitsWriteBack) {
  OrderCheck order;
  auto store = ShardStore::create(kChunks, kWindow, DType::kF32, settings(OffloadDevice::kNvme, order.hook()));
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<float> ones(kWindow, 1.0f);
  for (int u : {1, 2, 3}) ASSERT_TRUE((*store)->add(u * kWindow + 2000, ones.data(), DType::kF32, kWindow, true).ok());
  ASSERT_TRUE((*store)->fetch(2).ok());
  ASSERT_TRUE((*store)->add(2 * kWindow + 2000, ones.data(), DType::kF32, kWindow, false).ok());
  ASSERT_TRUE((*store)->flush().ok());
  auto got = (*store)->acquire(2);
  ASSERT_TRUE(got.ok()) << got.status();
  const float* twos = static_cast<const float*>(*got);
  EXPECT_TRUE(std::all_of(twos, twos + kWindow, [](float x) { return x == 2.0f; }));
  (*store)->release(2);
  store->reset();
  EXPECT_EQ(order.overlaps(), 0);
}

}  // namespace
}  // namespace zerod
