// A step's micro-batch gradients summed on the host as an offloaded store
// receives them in bf16 (shard/host_adds.h): each added to the fp32 sum as
// it comes (the sum read and written every micro-batch), against groups of
// 2 and 4 held and added in one pass (MicroBatchSums::fold: the sum read
// and written once a group). The same adds in the same order: the sums are
// compared bit for bit. Per run: ms a step, micro-batch elements a second,
// and the speedup over one at a time, best of several, the variants
// alternated round by round, over the host's OpenMP threads.
//
//   build/bench/host_sums_throughput [Melements] [micro-batches]   (default 64 8)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/dtype.h"

namespace zerod {
namespace {

int run(int64_t n, int micro_batches) {
  std::vector<std::vector<uint16_t>> parts(micro_batches, std::vector<uint16_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> x(n);
  for (auto& p : parts) {
    for (float& v : x) v = d(rng);
    convert_from_f32(DType::kBF16, x.data(), p.data(), n);
  }
  auto sum_by = [&](int fold, std::vector<float>& sum) {
    for (int first = 0; first < micro_batches; first += fold) {
      std::vector<const void*> srcs;
      for (int m = first; m < std::min(micro_batches, first + fold); ++m) srcs.push_back(parts[m].data());
      accumulate_f32(DType::kBF16, srcs, sum.data(), n, first == 0);
    }
  };
  const int folds[] = {1, 2, 4};
  std::vector<std::vector<float>> sums(3, std::vector<float>(n));
  double best[3] = {1e30, 1e30, 1e30};
  for (int r = 0; r < 6; ++r) {
    for (int i = 0; i < 3; ++i) {
      const int k = (i + r) % 3;  // each variant in each place of the round
      best[k] = std::min(best[k], bench::seconds([&] { sum_by(folds[k], sums[k]); }));
    }
  }
  for (int k = 1; k < 3; ++k) {
    if (std::memcmp(sums[k].data(), sums[0].data(), n * sizeof(float)) != 0) {
      std::fprintf(stderr, "fold %d gives other bits than one at a time\n", folds[k]);
      return 1;
    }
  }
  std::printf("%lld M elements, %d bf16 micro-batches summed in fp32, best of 6 (bits equal)\n",
              static_cast<long long>(n >> 20), micro_batches);
  std::printf("%-24s %10s %16s %10s\n", "", "ms/step", "G elements/s", "speedup");
  for (int k = 0; k < 3; ++k) {
    std::printf("%-24s %10.1f %16.2f %9.2fx\n",
                folds[k] == 1 ? "one at a time" : (folds[k] == 2 ? "2 a pass" : "4 a pass"), best[k] * 1e3,
                static_cast<double>(n) * micro_batches / best[k] / 1e9, best[0] / best[k]);
  }
  return 0;
}

}  // namespace
}  // namespace zerod

int main(int argc, char** argv) {
  const int64_t mega = argc > 1 ? std::atoll(argv[1]) : 64;
  const int micro_batches = argc > 2 ? std::atoi(argv[2]) : 8;
  if (mega <= 0 || micro_batches <= 0) {
    std::fprintf(stderr, "usage: host_sums_throughput [Melements > 0] [micro-batches > 0]\n");
    return 2;
  }
  return zerod::run(mega << 20, micro_batches);
}
