// The reference for the offload path's host-device copies: a plain
// cudaMemcpyAsync (Device::copy) between pinned host memory and the GPU,
// each way, for copies of the given sizes, timed by the stream's own
// events, and both ways at once on two streams (each way's rate). The
// offload path's rate is in a run's wall_clock_breakdown
// ("copy host->device", "copy device->host": bytes and GB/s); gpu_check.sh
// prints both from the same call. Then what pinning costs an offloaded
// run's start (its "ready" line): 4 GiB pinned as the run pins it, its
// pages touched on every thread and registered by the background threads,
// in one buffer against 8 (which those threads register at once).
//
//   build/bench/copy_bandwidth [MiB ...]      (default 1 2 4 8 16 64 256)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/pinned_host.h"

namespace zerod {
namespace {

// GB/s of the best of five copies of `bytes` from src to dst.
absl::StatusOr<double> best_rate(Device& d, void* dst, const void* src, uint64_t bytes) {
  ZEROD_ASSIGN_OR_RETURN(const double ms,
                         bench::best_device_ms(d, [&] { d.copy(d.compute_stream(), dst, src, bytes); }, 5));
  return ms > 0 ? bytes / ms / 1e6 : 0.0;
}

// What pinning `bytes` costs as a run pins it: in `parts` buffers from
// allocate_pinned, whose pages are touched on the calling thread's team and
// registered by the background threads, until each is awaited.
absl::Status pinning_rates(uint64_t bytes, int parts) {
  const uint64_t part = bytes / parts;  // whole pages: 4 GiB in 1 or 8
  const PinningTimes before = pinning_times();
  std::vector<void*> pinned;
  absl::Status s;
  const double ready_s = bench::seconds([&] {
    for (int i = 0; i < parts && s.ok(); ++i) {
      absl::StatusOr<void*> p = allocate_pinned(part);
      if (p.ok()) pinned.push_back(*p);
      s = p.status();
    }
    for (void* p : pinned) {
      if (s.ok()) s = await_pinned(p, part);
    }
  });
  const PinningTimes t = pinning_times().since(before);
  for (void* p : pinned) free_pinned(p);
  ZEROD_RETURN_IF_ERROR(s);
  std::printf("pinning %llu MiB in %d buffer(s): pages touched %.2f GB/s, registered %.2f GB/s a thread, "
              "all registered %.2f s after the first allocation\n",
              static_cast<unsigned long long>(bytes >> 20), parts, bytes / t.touch_s / 1e9,
              bytes / t.register_s / 1e9, ready_s);
  return absl::OkStatus();
}

absl::Status run(const std::vector<uint64_t>& mib) {
  if (cuda_device_count() == 0) return absl::FailedPreconditionError("copy_bandwidth needs a CUDA device; none here");
  ZEROD_ASSIGN_OR_RETURN(auto d, open_device("cuda"));
  std::printf("%s: cudaMemcpyAsync between pinned host memory and the GPU, best of 5\n", d->description().c_str());
  std::printf("%10s %14s %14s %20s\n", "MiB", "host->device", "device->host", "both at once, each");
  // The other way, on a stream of its own, for the copies both ways at once.
  ZEROD_ASSIGN_OR_RETURN(auto up, d->create_stream());
  ZEROD_ASSIGN_OR_RETURN(auto fork, d->create_event());
  ZEROD_ASSIGN_OR_RETURN(auto join, d->create_event());
  for (uint64_t m : mib) {
    const uint64_t bytes = m << 20;
    ZEROD_ASSIGN_OR_RETURN(Buffer host, d->allocate(bytes, Category::kOffload, Tier::kPinned));
    ZEROD_ASSIGN_OR_RETURN(Buffer host2, d->allocate(bytes, Category::kOffload, Tier::kPinned));
    ZEROD_ASSIGN_OR_RETURN(Buffer gpu, d->allocate(bytes, Category::kOffload));
    ZEROD_ASSIGN_OR_RETURN(Buffer gpu2, d->allocate(bytes, Category::kOffload));
    ZEROD_ASSIGN_OR_RETURN(const double h2d, best_rate(*d, gpu.data(), host.data(), bytes));
    ZEROD_ASSIGN_OR_RETURN(const double d2h, best_rate(*d, host.data(), gpu.data(), bytes));
    Stream& down = d->compute_stream();
    ZEROD_ASSIGN_OR_RETURN(const double both_ms, bench::best_device_ms(*d, [&] {
      d->record(down, *fork);
      d->wait(*up, *fork);
      d->copy(*up, host2.data(), gpu2.data(), bytes);
      d->copy(down, gpu.data(), host.data(), bytes);
      d->record(*up, *join);
      d->wait(down, *join);
    }, 5));
    std::printf("%10llu %9.2f GB/s %9.2f GB/s %15.2f GB/s\n", static_cast<unsigned long long>(m), h2d, d2h,
                both_ms > 0 ? bytes / both_ms / 1e6 : 0.0);
  }
  for (int parts : {1, 8}) ZEROD_RETURN_IF_ERROR(pinning_rates(uint64_t{4} << 30, parts));
  return absl::OkStatus();
}

}  // namespace
}  // namespace zerod

int main(int argc, char** argv) {
  std::vector<uint64_t> mib;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const unsigned long long m = std::strtoull(argv[i], &end, 10);
    if (*end != '\0' || m == 0 || m > (1u << 16)) {
      std::fprintf(stderr, "copy_bandwidth: '%s' is not a size in MiB (1 to 65536)\n", argv[i]);
      return 2;
    }
    mib.push_back(m);
  }
  if (mib.empty()) mib = {1, 2, 4, 8, 16, 64, 256};
  const absl::Status s = zerod::run(mib);
  if (!s.ok()) {
    std::fprintf(stderr, "copy_bandwidth: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
