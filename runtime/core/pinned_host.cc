#include "runtime/core/pinned_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/memory.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it (EINVAL)
#endif

namespace zerod {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

// The kernel's page, what mmap and munmap work in (4 KiB, or 64 KiB on
// some Arm machines).
uint64_t system_page() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Fresh pages faulted in writable over the OpenMP team, their bytes (zero)
// unwritten; where the kernel cannot (older than 5.14, or a sandbox's),
// written with zeros, which they are. Where the machine has not the memory
// (ENOMEM) that is returned: writing the pages would only bring the
// kernel's end of the process.
bool populate(char* p, uint64_t bytes) {
  std::atomic<bool> short_of_memory{false};
  for_each_part(bytes, kHugePage, [p, &short_of_memory](uint64_t at, uint64_t n) {
    if (short_of_memory.load(std::memory_order_relaxed) || madvise(p + at, n, MADV_POPULATE_WRITE) == 0) return;
    if (errno == ENOMEM) {
      short_of_memory.store(true, std::memory_order_relaxed);
    } else {
      std::memset(p + at, 0, n);
    }
  });
  return !short_of_memory.load();
}

class Registry {
 public:
  // Never destroyed: a Buffer freed during exit still finds it.
  static Registry& get() {
    static Registry* r = new Registry();
    return *r;
  }

  void add(char* p, uint64_t size, int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      start_threads();
      Allocation& a = allocations_[p];
      a.size = size;
      a.device = device;
      a.hook = hook_;
      queue_.push_back(p);
      unfinished_.fetch_add(1, std::memory_order_relaxed);
      times_.bytes += size;
    }
    work_.notify_one();
  }

  absl::Status can_pin() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (hook_) return absl::OkStatus();
    }
    return can_pin_host();
  }

  void add_touch(double s) {
    std::lock_guard<std::mutex> lock(mu_);
    times_.touch_s += s;
  }

  void free(void* p) {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = allocations_.find(static_cast<char*>(p));
    if (it == allocations_.end()) {
      std::fprintf(stderr, "zerod: free_pinned of %p, which allocate_pinned did not give\n", p);
      std::abort();
    }
    // Only this free erases it: `it` stays valid through the wait.
    done_.wait(lock, [&] { return it->second.state != State::kRegistering; });
    const Allocation a = it->second;
    if (a.state == State::kQueued) {
      dequeue(it->first);
      finished();
    }
    if (a.state == State::kFailed) failed_.fetch_sub(1, std::memory_order_relaxed);
    allocations_.erase(it);
    lock.unlock();
    if (a.state == State::kRegistered) a.hook ? a.hook->unpin(p) : unpin_host(p);
    munmap(p, a.size);
  }

  absl::Status await(const void* p, uint64_t bytes) {
    if (bytes == 0 || settled()) return absl::OkStatus();
    const char* begin = static_cast<const char*>(p);
    const char* end = begin + bytes;
    std::unique_lock<std::mutex> lock(mu_);
    const auto started = std::chrono::steady_clock::now();
    bool waited = false;
    absl::Status result;
    // Each allocation meeting [begin, end) in address order, found again by
    // address after the lock was let go (another thread may free a
    // neighbour meanwhile).
    char* at = nullptr;
    for (auto it = first_meeting(begin); it != allocations_.end() && it->first < end;
         it = allocations_.upper_bound(at)) {
      at = it->first;
      if (it->second.state == State::kQueued) {
        take(at);
        waited = true;
        lock.unlock();
        run_registration(at, /*background=*/false);  // here, not after those queued before it
        lock.lock();
      }
      auto registering = [&] {
        auto f = allocations_.find(at);
        return f != allocations_.end() && f->second.state == State::kRegistering;
      };
      if (registering()) {
        waited = true;
        done_.wait(lock, [&] { return !registering(); });
      }
      const auto f = allocations_.find(at);
      if (f != allocations_.end() && f->second.state == State::kFailed && result.ok()) result = f->second.error;
    }
    if (waited) times_.wait_s += seconds_since(started);
    return result;
  }

  bool pending(const void* p, uint64_t bytes) {
    if (bytes == 0 || unfinished_.load(std::memory_order_acquire) == 0) return false;
    const char* begin = static_cast<const char*>(p);
    const char* end = begin + bytes;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = first_meeting(begin); it != allocations_.end() && it->first < end; ++it) {
      if (it->second.state == State::kQueued || it->second.state == State::kRegistering) return true;
    }
    return false;
  }

  PinningTimes times() {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

  // The hook replaced may go once this returns, but for unregistering
  // what it registered: its allocations queued are registered here, those
  // registering waited for.
  void set_hook(const PinningHook* hook) {
    std::vector<char*> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const PinningHook* replaced = std::exchange(hook_, hook);
      for (const auto& [p, a] : allocations_) {
        const bool unsettled = a.state == State::kQueued || a.state == State::kRegistering;
        if (replaced && a.hook == replaced && unsettled) pending.push_back(p);
      }
    }
    for (char* p : pending) await(p, 1).IgnoreError();
  }

 private:
  enum class State { kQueued, kRegistering, kRegistered, kFailed };
  struct Allocation {
    uint64_t size = 0;
    int device = -1;  // the process's GPU: a background thread's to register in
    const PinningHook* hook = nullptr;  // set when it was allocated: registers and unregisters it
    State state = State::kQueued;
    absl::Status error;
  };

  // Under the lock: the allocation at p is this thread's to register.
  void take(char* p) {
    dequeue(p);
    allocations_.at(p).state = State::kRegistering;
  }

  // Registers the allocation at p, taken (the lock is not held). A
  // background thread makes the allocating thread's device its own; a
  // copy's thread registers in its own context (any serves: portable).
  void run_registration(char* p, bool background) {
    std::unique_lock<std::mutex> lock(mu_);
    const Allocation& a = allocations_.at(p);
    const uint64_t size = a.size;
    const int device = background ? a.device : -1;
    const PinningHook* hook = a.hook;
    lock.unlock();
    const auto t = std::chrono::steady_clock::now();
    absl::Status s = hook ? hook->pin(p, size) : pin_host(p, size, device);
    const double took = seconds_since(t);
    lock.lock();
    Allocation& b = allocations_.at(p);
    b.state = s.ok() ? State::kRegistered : State::kFailed;
    b.error = std::move(s);
    times_.register_s += took;
    if (b.state == State::kRegistered) {
      times_.registered_bytes += size;
    } else {
      failed_.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "zerod: warning: %llu bytes of pinned host memory not registered (%s): copies to and "
                   "from them run at pageable speed\n",
                   static_cast<unsigned long long>(size), std::string(b.error.message()).c_str());
    }
    finished();
    done_.notify_all();
  }

  // Under the lock: the allocation holding `begin`, else the first after it.
  std::map<char*, Allocation>::iterator first_meeting(const char* begin) {
    auto it = allocations_.upper_bound(const_cast<char*>(begin));
    if (it != allocations_.begin() && std::prev(it)->first + std::prev(it)->second.size > begin) --it;
    return it;
  }

  // No registration waiting or failed: what awaits have nothing to say of.
  bool settled() const {
    return unfinished_.load(std::memory_order_acquire) == 0 && failed_.load(std::memory_order_relaxed) == 0;
  }

  // Under the lock.
  void dequeue(char* p) { queue_.erase(std::find(queue_.begin(), queue_.end(), p)); }
  void finished() { unfinished_.fetch_sub(1, std::memory_order_release); }

  // A few threads: registering is mostly the kernel's work on the calling
  // thread, and separate buffers register at once where the driver lets them.
  void start_threads() {
    if (!threads_.empty() || stopping_) return;
    // stop() runs at exit before CUDA's teardown: handlers run last first,
    // and CUDA registered its own when can_pin() asked it for devices.
    std::atexit([] { get().stop(); });
    const int n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { serve(); });
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      char* p = queue_.front();
      take(p);
      lock.unlock();
      run_registration(p, /*background=*/true);
      lock.lock();
    }
  }

  // What is queued then is registered by whatever awaits it, if anything.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  std::mutex mu_;
  std::condition_variable work_, done_;
  std::map<char*, Allocation> allocations_;  // by address, every one alive
  std::deque<char*> queue_;                  // those waiting for a thread, oldest first
  std::atomic<int64_t> unfinished_{0};       // queued or registering: awaits' fast path
  std::atomic<int64_t> failed_{0};           // alive with a failed registration
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  const PinningHook* hook_ = nullptr;  // what new allocations register with
  PinningTimes times_;
};

}  // namespace

PinningTimes pinning_times() { return Registry::get().times(); }

absl::StatusOr<void*> allocate_pinned(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  Registry& r = Registry::get();
  // Nothing to register it with (no GPU) is found here, not at a first copy.
  ZEROD_RETURN_IF_ERROR(r.can_pin());
  const uint64_t page = std::max(system_page(), kPageBytes);
  const uint64_t size = (bytes + page - 1) / page * page;
  const uint64_t align = size >= kHugePage ? std::max(kHugePage, page) : page;
  // Fresh anonymous pages are zero; mapped with room to start on `align`.
  const uint64_t mapped = size + align - page;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", size, " bytes to pin failed"));
  }
  char* const base = static_cast<char*>(m);
  char* const p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + align - 1) / align * align);
  if (p > base) munmap(base, p - base);
  if (base + mapped > p + size) munmap(p + size, base + mapped - (p + size));
  if (align == kHugePage) madvise(p, size, MADV_HUGEPAGE);  // a hint, ignored where huge pages are off
  const auto t = std::chrono::steady_clock::now();
  if (!populate(p, size)) {
    munmap(p, size);
    return absl::ResourceExhaustedError(
        absl::StrCat("host allocation of ", size, " bytes to pin failed: the machine has not the memory (ENOMEM)"));
  }
  r.add_touch(seconds_since(t));
  r.add(p, size, opened_cuda_device());
  return static_cast<void*>(p);
}

void free_pinned(void* p) {
  if (p) Registry::get().free(p);
}

absl::Status await_pinned(const void* p, uint64_t bytes) { return Registry::get().await(p, bytes); }

bool pinning_pending(const void* p, uint64_t bytes) { return Registry::get().pending(p, bytes); }

void set_pinning_hook(const PinningHook* hook) { Registry::get().set_hook(hook); }

}  // namespace zerod
