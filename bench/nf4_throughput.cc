// NF4 dequantization against the machine's memory bandwidth, in one run:
// a frozen 4-bit linear layer [n / 4096, 4096] is dequantized into its
// product's fp32 operands (transposed, as the CPU's table does it) for
// every product it takes part in, so the pass is a stream, and the triad
// of the same run says how fast the memory lets it be. Effective bandwidth
// = bytes per weight moved (read the code's half byte and the block's share
// of the absmax codes and group absmax, write fp32: 4.516) x weights per
// second. Quantization runs once, when the base is loaded; its time is
// shown beside.
//
//   build/bench/nf4_throughput [max_millions_of_weights=64]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/kernels/ops/nf4.h"

int main(int argc, char** argv) {
  using zerod::bench::best_seconds;
  const int64_t max_m = argc > 1 ? std::atoll(argv[1]) : 64;
  const double triad = zerod::bench::triad_gbs(int64_t(64) << 20);
  std::printf("triad bandwidth: %.1f GB/s (3 x 256 MB arrays)\n", triad);
  std::printf("%10s %12s %12s %10s %9s %14s\n", "weights", "ms/pass", "Mweights/s", "GB/s", "of triad", "quantize ms");
  for (int64_t m = 1; m <= max_m; m *= 4) {
    const int64_t n = m << 20;
    const zerod::Nf4Sizes z = zerod::nf4_sizes(n);
    std::vector<float> w(n), out = zerod::bench::filled(n, 0);
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& x : w) x = normal(rng);
    const zerod::Nf4HostTensor h(n);
    const zerod::Nf4Tensor& t = h.t;
    const double q = best_seconds([&] { zerod::nf4_quantize(w.data(), t); }, 0.0);
    const int64_t cols = 4096, rows = n / cols;
    const double s = best_seconds([&] { zerod::nf4_dequantize_transposed(t, rows, cols, rows, out.data()); });
    const double bytes = (static_cast<double>(z.bytes()) + 4.0 * n) / n;
    const double gbs = bytes * n / s / 1e9;
    std::printf("%9lldM %12.2f %12.1f %10.1f %8.0f%% %14.1f\n", static_cast<long long>(m), s * 1e3, n / s / 1e6, gbs,
                100.0 * gbs / triad, q * 1e3);
    std::fflush(stdout);
  }
  return 0;
}
