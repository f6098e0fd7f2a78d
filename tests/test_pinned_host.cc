// Pinned host memory registered behind the allocation (runtime/core/pinned_host.h),
// through a PinningHook that stands in for CUDA and holds the background
// threads' registrations at a gate:
//   - an allocation returns zeroed, aligned memory at once, its registration
//     pending, and the host may write it meanwhile;
//   - await registers a queued allocation on the calling thread, waits for
//     one a background thread holds, and names a failed one's error;
//   - free cancels a queued registration, waits for a running one, undoes a
//     done one, and never undoes a failed one;
//   - replacing the hook settles what it was to register;
//   - a device's copy awaits the registration of what it copies;
//   - on a GPU, CUDA's own registration: copies' bytes, and a clean exit
//     with registrations under way.
#include "runtime/core/pinned_host.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {
namespace {

// Registration that any host runs: the test's own thread registers at once,
// every other thread (the background ones) waits at a gate until it opens.
class GatedHook {
 public:
  GatedHook() {
    hook_.pin = [this](void* p, uint64_t bytes) { return pin(p, bytes); };
    hook_.unpin = [this](void* p) {
      std::lock_guard<std::mutex> lock(mu_);
      ++unpinned_[p];
    };
    set_pinning_hook(&hook_);
  }
  ~GatedHook() {
    open();
    set_pinning_hook(nullptr);
  }

  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void fail(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    failing_ = p;
  }
  // Who registered p: 0 not yet, 1 the test's thread, 2 another.
  int registered_by(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_.find(p);
    return it == by_.end() ? 0 : it->second;
  }
  int unpinned(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return unpinned_[p];
  }
  // Whether a background thread holds p at the gate within 10 s.
  bool held(void* p) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_.count(p) > 0; });
  }

 private:
  absl::Status pin(void* p, uint64_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool mine = std::this_thread::get_id() == test_thread_;
    if (!mine) {
      held_.insert(p);
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    by_[p] = mine ? 1 : 2;
    if (p == failing_) return absl::ResourceExhaustedError(absl::StrCat("registering ", bytes, " bytes failed"));
    return absl::OkStatus();
  }

  PinningHook hook_;
  const std::thread::id test_thread_ = std::this_thread::get_id();
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  void* failing_ = nullptr;
  std::map<void*, int> by_, unpinned_;
  std::set<void*> held_;
};

// More allocations than the background threads (at most 4), each of which
// takes one from the front of the queue and holds it at the gate: the last
// two stay queued until a copy awaits them.
constexpr int kBuffers = 6;

// kBuffers allocations of `bytes` each, in order; null where one failed.
std::vector<char*> allocate_all(uint64_t bytes) {
  std::vector<char*> bufs;
  for (int i = 0; i < kBuffers; ++i) {
    auto p = allocate_pinned(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    bufs.push_back(p.ok() ? static_cast<char*>(*p) : nullptr);
  }
  return bufs;
}

TEST(PinnedHost, RefusedWhereNothingCanRegisterIt) {
  const PinningTimes before = pinning_times();
  auto p = allocate_pinned(3 * 4096 + 1);
  if (cuda_device_count() > 0) {  // CUDA registers it: whole pages counted
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(await_pinned(*p, 4 * 4096).ok());
    EXPECT_EQ(pinning_times().since(before).registered_bytes, 4u * 4096);
    free_pinned(*p);
    return;
  }
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(p.status().message()).find("pinned host memory"), std::string::npos) << p.status();
  EXPECT_EQ(pinning_times().since(before).bytes, 0u);  // nothing was pinned
}

TEST(PinnedHost, AllocationReturnsAtOnceAndAwaitRegistersOrWaits) {
  GatedHook hook;
  const PinningTimes before = pinning_times();
  const uint64_t sizes[kBuffers] = {(uint64_t{3} << 20) + 5, 100, 4096, 4097, uint64_t{2} << 20, 12345};
  std::vector<char*> bufs;
  uint64_t pages = 0;
  for (uint64_t n : sizes) {
    auto p = allocate_pinned(n);
    ASSERT_TRUE(p.ok()) << p.status();
    char* b = static_cast<char*>(*p);
    const uint64_t rounded = (n + 4095) / 4096 * 4096;
    pages += rounded;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % (rounded >= (uint64_t{2} << 20) ? uint64_t{2} << 20 : 4096), 0u) << n;
    // Zeroed, every page; and the host's to write before it is registered.
    for (uint64_t i = 0; i < rounded; i += 997) ASSERT_EQ(b[i], 0) << n << " at " << i;
    EXPECT_TRUE(pinning_pending(b, 1)) << n;
    std::memset(b, 0x5A, n);
    bufs.push_back(b);
  }
  const PinningTimes allocated = pinning_times().since(before);
  EXPECT_EQ(allocated.bytes, pages);
  EXPECT_EQ(allocated.registered_bytes, 0u);  // the gate holds the background threads

  // The last is queued still: a copy's await registers it here and now.
  EXPECT_EQ(hook.registered_by(bufs[5]), 0);
  ASSERT_TRUE(await_pinned(bufs[5] + 10, 100).ok());
  EXPECT_EQ(hook.registered_by(bufs[5]), 1);
  EXPECT_FALSE(pinning_pending(bufs[5], sizes[5]));
  EXPECT_TRUE(pinning_pending(bufs[0], 1));

  // The first is a background thread's, held at the gate: an await of a
  // range inside it, from another thread, returns only once the gate opens.
  std::atomic<bool> started{false}, returned{false};
  absl::Status awaited;
  std::thread other([&] {
    started = true;
    awaited = await_pinned(bufs[0] + 4096, 8192);
    returned = true;
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  hook.open();
  other.join();
  EXPECT_TRUE(awaited.ok()) << awaited;
  EXPECT_EQ(hook.registered_by(bufs[0]), 2);
  // One range over all of them: each registered by its return, and the
  // host's bytes as it wrote them.
  const char* lo = *std::min_element(bufs.begin(), bufs.end());
  const char* hi = *std::max_element(bufs.begin(), bufs.end());
  ASSERT_TRUE(await_pinned(lo, hi - lo + 1).ok());
  for (int i = 0; i < kBuffers; ++i) {
    EXPECT_FALSE(pinning_pending(bufs[i], sizes[i])) << i;
    EXPECT_NE(hook.registered_by(bufs[i]), 0) << i;
    EXPECT_EQ(bufs[i][sizes[i] - 1], 0x5A) << i;
  }
  const PinningTimes done = pinning_times().since(before);
  EXPECT_EQ(done.registered_bytes, pages);
  EXPECT_GT(done.wait_s, 0.0);  // this thread's registration of the last, at least
  EXPECT_GE(done.register_s, 0.0);
  for (char* b : bufs) free_pinned(b);
  for (char* b : bufs) EXPECT_EQ(hook.unpinned(b), 1);
}

TEST(PinnedHost, AwaitOfOtherMemoryReturnsAtOnce) {
  GatedHook hook;
  auto p = allocate_pinned(8192);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<char> host(1 << 16);
  int on_stack = 0;
  EXPECT_TRUE(await_pinned(host.data(), host.size()).ok());
  EXPECT_TRUE(await_pinned(&on_stack, sizeof on_stack).ok());
  EXPECT_FALSE(pinning_pending(host.data(), host.size()));
  // Just past its end is not it either.
  EXPECT_TRUE(await_pinned(static_cast<char*>(*p) + 8192, 64).ok());
  EXPECT_TRUE(pinning_pending(*p, 8192));
  hook.open();
  free_pinned(*p);
}

TEST(PinnedHost, FreeCancelsWaitsForOrUndoesTheRegistration) {
  GatedHook hook;
  const std::vector<char*> bufs = allocate_all(64 << 10);
  ASSERT_EQ(std::count(bufs.begin(), bufs.end(), nullptr), 0);
  // Queued: gone without ever being registered.
  free_pinned(bufs[5]);
  EXPECT_EQ(hook.registered_by(bufs[5]), 0);
  EXPECT_EQ(hook.unpinned(bufs[5]), 0);
  // Registered (here): undone once.
  ASSERT_TRUE(await_pinned(bufs[4], 1).ok());
  free_pinned(bufs[4]);
  EXPECT_EQ(hook.unpinned(bufs[4]), 1);
  // Held at the gate by a background thread: the free waits for it.
  ASSERT_TRUE(hook.held(bufs[0]));
  std::atomic<bool> started{false}, freed{false};
  std::thread other([&] {
    started = true;
    free_pinned(bufs[0]);
    freed = true;
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(freed.load());
  hook.open();
  other.join();
  EXPECT_EQ(hook.registered_by(bufs[0]), 2);
  EXPECT_EQ(hook.unpinned(bufs[0]), 1);
  for (int i = 1; i < 4; ++i) free_pinned(bufs[i]);
}

TEST(PinnedHost, AFailedRegistrationIsNamedAndNeverUndone) {
  GatedHook hook;
  const std::vector<char*> bufs = allocate_all(3 * 4096);
  ASSERT_EQ(std::count(bufs.begin(), bufs.end(), nullptr), 0);
  char* b = bufs.back();  // queued: registered, and failing, on this thread
  hook.fail(b);
  const absl::Status s = await_pinned(b, 3 * 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(std::string(s.message()).find("registering 12288 bytes failed"), std::string::npos) << s;
  EXPECT_EQ(await_pinned(b + 4096, 1).code(), absl::StatusCode::kResourceExhausted);  // each time asked
  EXPECT_FALSE(pinning_pending(b, 1));  // not waiting: failed
  b[0] = 1;                             // and still host memory
  ASSERT_TRUE(hook.held(bufs[0]));
  hook.open();
  for (int i = 0; i + 1 < kBuffers; ++i) ASSERT_TRUE(await_pinned(bufs[i], 1).ok()) << i;
  // Nothing is queued or registering now: the failure is still named.
  EXPECT_EQ(await_pinned(b, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(await_pinned(b, 0).ok());  // an empty range meets nothing
  for (char* p : bufs) free_pinned(p);
  EXPECT_EQ(hook.unpinned(b), 0);
  EXPECT_EQ(hook.unpinned(bufs[0]), 1);
}

// A hook replaced has registered everything allocated under it when the
// replacing returns (what lets a test's hook go, whatever the test left).
TEST(PinnedHost, ReplacingTheHookSettlesWhatItWasToRegister) {
  GatedHook hook;
  const std::vector<char*> bufs = allocate_all(3 * 4096);
  ASSERT_EQ(std::count(bufs.begin(), bufs.end(), nullptr), 0);
  ASSERT_TRUE(hook.held(bufs[0]));
  // The gate opens while the replacing waits for the held one; the queued
  // ones it registers itself.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    hook.open();
  });
  set_pinning_hook(nullptr);
  for (char* b : bufs) {
    EXPECT_FALSE(pinning_pending(b, 3 * 4096));
    EXPECT_NE(hook.registered_by(b), 0);
  }
  opener.join();
  for (char* b : bufs) free_pinned(b);
  for (char* b : bufs) EXPECT_EQ(hook.unpinned(b), 1);  // through the hook that registered it
}

TEST(PinnedHost, ADeviceCopyAwaitsTheRegistrationOfWhatItCopies) {
  GatedHook hook;
  CpuDeviceOptions o;
  o.threaded = true;
  o.gpu_tier = true;
  o.pins = true;  // a copy meeting pinned memory not yet registered aborts
  MemoryAccountant acct;
  CpuDevice gpu(acct, o);
  std::vector<Buffer> staging;
  for (int i = 0; i < kBuffers; ++i) {
    auto b = gpu.allocate(1 << 20, Category::kOffload, Tier::kPinned);
    ASSERT_TRUE(b.ok()) << b.status();
    staging.push_back(*std::move(b));
  }
  Buffer& last = staging.back();  // queued behind the gate
  for (int i = 0; i < (1 << 20); ++i) last.host<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  auto dev = gpu.allocate(1 << 20, Category::kOffload);
  ASSERT_TRUE(dev.ok());
  gpu.copy(gpu.compute_stream(), dev->data(), last.data(), 1 << 20);
  EXPECT_EQ(hook.registered_by(last.data()), 1);  // by the copy, before it was enqueued
  auto back = gpu.allocate(1 << 20, Category::kOffload, Tier::kHost);
  ASSERT_TRUE(back.ok());
  gpu.copy(gpu.compute_stream(), back->data(), dev->data(), 1 << 20);
  ASSERT_TRUE(gpu.synchronize(gpu.compute_stream()).ok());
  EXPECT_EQ(std::memcmp(back->data(), last.data(), 1 << 20), 0);
  hook.open();
  staging.clear();
  EXPECT_EQ(acct.current_total(Tier::kPinned), 0u);
}

// On a GPU, CUDA's own registration behind the allocation (no hook): the
// host writes buffers while they register, each goes to the GPU and back
// through a device's copies (which await it) with its bytes as written; one
// freed at once is cancelled or waited for; every byte is registered.
TEST(PinnedHostOnGpu, CopiesAwaitCudasRegistrationBehindTheAllocation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
  MemoryAccountant acct;
  auto opened = open_cuda_device(0, acct);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Device& gpu = **opened;
  constexpr uint64_t kBytes = uint64_t{64} << 20;
  constexpr int kN = 8;
  const PinningTimes before = pinning_times();
  auto gone = allocate_pinned(kBytes);
  ASSERT_TRUE(gone.ok()) << gone.status();
  free_pinned(*gone);
  std::vector<Buffer> out, back;
  for (int k = 0; k < kN; ++k) {
    for (std::vector<Buffer>* v : {&out, &back}) {
      auto b = gpu.allocate(kBytes, Category::kOffload, Tier::kPinned);
      ASSERT_TRUE(b.ok()) << b.status();
      v->push_back(*std::move(b));
    }
    uint32_t* w = out.back().host<uint32_t>();
    for (uint64_t i = 0; i < kBytes / 4; ++i) w[i] = static_cast<uint32_t>(i * 2654435761u + k);
  }
  auto on_gpu = gpu.allocate(kBytes, Category::kOffload);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  Stream& s = gpu.compute_stream();
  for (int k = 0; k < kN; ++k) {
    gpu.copy(s, on_gpu->data(), out[k].data(), kBytes);
    gpu.copy(s, back[k].data(), on_gpu->data(), kBytes);
    ASSERT_TRUE(gpu.synchronize(s).ok());
    EXPECT_EQ(std::memcmp(back[k].data(), out[k].data(), kBytes), 0) << k;
  }
  const PinningTimes pinned = pinning_times().since(before);
  EXPECT_EQ(pinned.bytes, (2 * kN + 1) * kBytes);
  // The one freed at once counts where its registration had begun.
  EXPECT_GE(pinned.registered_bytes, 2 * kN * kBytes);
  EXPECT_LE(pinned.registered_bytes, (2 * kN + 1) * kBytes);
}

// A process that exits with registrations queued and one running ends the
// background threads before CUDA's teardown, and exits cleanly. The
// registry is made before CUDA starts, as a run's counters make it.
TEST(PinnedHostOnGpuDeathTest, ExitsCleanlyWithRegistrationsUnderWay) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork
  EXPECT_EXIT(
      {
        pinning_times();
        MemoryAccountant acct;
        if (!open_cuda_device(0, acct).ok()) std::_Exit(3);
        for (int i = 0; i < 8; ++i) {
          if (!allocate_pinned(uint64_t{256} << 20).ok()) std::_Exit(4);
        }
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace zerod
