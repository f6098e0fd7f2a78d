// The reference for the offload path's host-device copies: a plain
// cudaMemcpyAsync (Device::copy) between pinned host memory and the GPU,
// each way, for copies of the given sizes, timed by the stream's own
// events. The offload path's rate is in a run's wall_clock_breakdown
// ("copy host->device", "copy device->host": bytes and GB/s); gpu_check.sh
// prints both from the same call.
//
//   build/bench/copy_bandwidth [MiB ...]      (default 1 16 64 256)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {
namespace {

// GB/s of the best of five copies of `bytes` from src to dst.
absl::StatusOr<double> best_rate(Device& d, void* dst, const void* src, uint64_t bytes) {
  ZEROD_ASSIGN_OR_RETURN(const double ms,
                         bench::best_device_ms(d, [&] { d.copy(d.compute_stream(), dst, src, bytes); }, 5));
  return ms > 0 ? bytes / ms / 1e6 : 0.0;
}

absl::Status run(const std::vector<uint64_t>& mib) {
  if (cuda_device_count() == 0) return absl::FailedPreconditionError("copy_bandwidth needs a CUDA device; none here");
  ZEROD_ASSIGN_OR_RETURN(auto d, open_device("cuda"));
  std::printf("%s: cudaMemcpyAsync between pinned host memory and the GPU, best of 5\n", d->description().c_str());
  std::printf("%10s %14s %14s\n", "MiB", "host->device", "device->host");
  for (uint64_t m : mib) {
    const uint64_t bytes = m << 20;
    ZEROD_ASSIGN_OR_RETURN(Buffer host, d->allocate(bytes, Category::kOffload, Tier::kPinned));
    ZEROD_ASSIGN_OR_RETURN(Buffer gpu, d->allocate(bytes, Category::kOffload));
    ZEROD_ASSIGN_OR_RETURN(const double h2d, best_rate(*d, gpu.data(), host.data(), bytes));
    ZEROD_ASSIGN_OR_RETURN(const double d2h, best_rate(*d, host.data(), gpu.data(), bytes));
    std::printf("%10llu %9.2f GB/s %9.2f GB/s\n", static_cast<unsigned long long>(m), h2d, d2h);
  }
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
  if (mib.empty()) mib = {1, 16, 64, 256};
  const absl::Status s = zerod::run(mib);
  if (!s.ok()) {
    std::fprintf(stderr, "copy_bandwidth: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
