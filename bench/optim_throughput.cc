// The CPU optimizer kernels against the machine's memory bandwidth, in one
// run: a STREAM-style triad (a = b + s*c over buffers far larger than the
// caches, counted as STREAM does: 12 bytes per element) gives the bandwidth;
// each optimizer's effective bandwidth is the bytes it must move per
// parameter times parameters per second. The optimizers update in place,
// which on some machines streams faster than the triad's separate output.
//
//   build/bench/optim_throughput [max_millions_of_params=256] [isa=best]
//
// Bytes per parameter, fp32 gradients, no 16-bit copy:
//   AdamW, fp32 states:  read p g m v, write p m v           = 28
//   AdamW, 8-bit states: read p g, write p (12), m and v one byte each way
//                        (4), absmax 2 x 4 bytes each way per 256   = 16.0625
// Every figure is the best of several steps after a warm-up step, on all
// cores (OpenMP). The scalar path is the kernels' fallback for CPUs without
// AVX2, shown for contrast.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/kernels/cpu/cpu_isa.h"
#include "runtime/kernels/ops/adam8bit.h"

namespace {

using zerod::CpuIsa;
using zerod::bench::best_seconds;
using zerod::bench::filled;
using zerod::bench::triad_gbs;

// Gradients of both signs over three decades, so the 8-bit states spread
// over their maps' codes as in training (a constant gradient would put every
// state on the code 1.0).
std::vector<float> random_gradients(int64_t n) {
  std::vector<float> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;          // Knuth's multiplicative hash
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    v[i] = (h & 1 ? 1e-3f : -1e-3f) * std::pow(10.0f, -3.0f * u);
  }
  return v;
}

struct Row {
  int64_t n;
  std::string what;
  double seconds, bytes_per_param;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_m = argc > 1 ? std::atoll(argv[1]) : 256;
  std::vector<CpuIsa> isas = {zerod::best_cpu_isa()};
  if (argc > 2) {
    isas.clear();
    for (CpuIsa i : zerod::supported_cpu_isas()) {
      if (std::string(zerod::cpu_isa_name(i)) == argv[2]) isas.push_back(i);
    }
    if (isas.empty()) {
      std::fprintf(stderr, "instruction set '%s' is not supported here\n", argv[2]);
      return 2;
    }
  }
  if (isas.front() != CpuIsa::kScalar) isas.push_back(CpuIsa::kScalar);

  // 64M floats per array (768 MB in all) is far past any cache.
  const double triad = triad_gbs(int64_t(64) << 20);
  std::printf("triad bandwidth: %.1f GB/s (3 x 256 MB arrays)\n", triad);
  std::printf("%10s  %-22s %10s %12s %10s %9s\n", "params", "optimizer", "ms/step", "Mparams/s", "GB/s", "of triad");

  const zerod::AdamStep step = zerod::make_adam_step(zerod::AdamHyper{}, 1e-3f, 10, 1.0f, true);
  for (int64_t m = 1; m <= max_m; m *= 4) {
    const int64_t n = m << 20;
    std::vector<float> p = filled(n, 0.5f), g = random_gradients(n);
    std::vector<Row> rows;
    {
      std::vector<float> mo = filled(n, 0), vo = filled(n, 0);
      zerod::AdamTensor t{p.data(), mo.data(), vo.data(), g.data()};
      t.n = n;
      for (CpuIsa isa : isas) {
        // The scalar path is ~10x slower: one timed step is enough at the larger sizes.
        const double s = best_seconds([&] { zerod::adam_update(t, step, isa); }, isa == CpuIsa::kScalar ? 0.0 : 1.0);
        rows.push_back({n, std::string("AdamW fp32 ") + zerod::cpu_isa_name(isa), s, 28.0});
      }
    }
    {
      const int64_t blocks = zerod::quant_blocks(n);
      std::vector<uint8_t> mq(n), vq(n);
      std::vector<float> ma(blocks), va(blocks);
      zerod::Adam8bitTensor t{p.data(), mq.data(), vq.data(), ma.data(), va.data(), g.data()};
      t.n = n;
      zerod::adam8bit_zero_states(t);
      for (CpuIsa isa : isas) {
        const double s =
            best_seconds([&] { zerod::adam8bit_update(t, step, isa); }, isa == CpuIsa::kScalar ? 0.0 : 1.0);
        rows.push_back({n, std::string("AdamW 8-bit ") + zerod::cpu_isa_name(isa), s, 16.0 + 16.0 / 256});
      }
    }
    for (const Row& r : rows) {
      const double gbs = r.bytes_per_param * r.n / r.seconds / 1e9;
      std::printf("%9lldM  %-22s %10.2f %12.1f %10.1f %8.0f%%\n", static_cast<long long>(r.n >> 20), r.what.c_str(),
                  r.seconds * 1e3, r.n / r.seconds / 1e6, gbs, 100.0 * gbs / triad);
    }
    std::fflush(stdout);
  }
  return 0;
}
