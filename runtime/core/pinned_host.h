// Pinned host memory: registered with CUDA, so that the GPU's copies to and
// from it run at the link's speed.
//
// Registering tens of GB takes seconds, which an offloaded run's start used
// to spend before its first step. An allocation now returns once its pages
// are present (faulted in without being written, over the OpenMP team from
// 16 MiB),
// and its registration is queued for background threads in the order of
// allocation. Whatever copies to or from the memory calls await_pinned
// first (Device::copy does): it returns once the memory is registered,
// registering it on the calling thread if no other has begun. So the
// registrations overlap the initial weights' draws and the first step, and
// no copy runs from memory not yet registered. Host code may read and write
// the memory at any time: registering does not change its bytes.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/core/status.h"

namespace zerod {

// What pinned allocations have cost this process so far.
struct PinningTimes {
  uint64_t bytes = 0;             // allocated pinned (whole pages)
  uint64_t registered_bytes = 0;  // of those, registered
  // Seconds, each summed over the threads that spent them (so they may
  // add up to more than the wall clock's):
  double touch_s = 0;     // pages faulted in, by the allocating threads
  double register_s = 0;  // registering, by whichever threads did it
  double wait_s = 0;      // copies' threads waiting for a registration, or running one
  // What was pinned after `before` was taken.
  PinningTimes since(const PinningTimes& before) const {
    return {bytes - before.bytes, registered_bytes - before.registered_bytes, touch_s - before.touch_s,
            register_s - before.register_s, wait_s - before.wait_s};
  }
};
PinningTimes pinning_times();

// `bytes` (rounded up to whole pages) of zeroed host memory, page-aligned
// (2 MiB aligned from 2 MiB, as huge pages where the kernel gives them),
// its registration queued. Refused where nothing can register it (no CUDA
// device).
absl::StatusOr<void*> allocate_pinned(uint64_t bytes);
// Frees what allocate_pinned gave: its registration cancelled if not begun,
// else waited for and undone.
void free_pinned(void* p);
// Returns once every pinned allocation that [p, p + bytes) meets is
// registered; at once for any other memory. A failed registration's error
// is returned, each time: the memory stays usable, unpinned.
absl::Status await_pinned(const void* p, uint64_t bytes);
// Whether some of [p, p + bytes) is pinned memory not yet registered: what
// a copy must never see (the CPU device's check, standing in for a GPU).
bool pinning_pending(const void* p, uint64_t bytes);

// A test seam: registration through `pin` and `unpin` instead of CUDA,
// where any host can run them. Production code runs with none set.
struct PinningHook {
  std::function<absl::Status(void* p, uint64_t bytes)> pin;
  std::function<void(void* p)> unpin;
};
// Sets `hook` (nullptr: CUDA's again) for the allocations made from now on;
// each is unregistered through what registered it. Returns once no
// allocation of the hook replaced is left to register.
void set_pinning_hook(const PinningHook* hook);

}  // namespace zerod
