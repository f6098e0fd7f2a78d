// Random initialisation of a GPT's parameters (init_gpt_range) on one
// thread, as it ran before it was split into pieces, on all of the host's
// threads in one call, and on all of them 1M floats a call with cursors
// (as a GPU's 4 MiB of host staging takes them), alternated, the bits of
// the three compared: the part of a job's start that grows with the model
// (gpt2-xl: 1.56B normal draws).
//
//   build/bench/init_throughput [preset=gpt2] [rounds=2]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/model/gpt.h"

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "gpt2";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 2;
  auto cfg = zerod::gpt_preset(preset);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
    return 2;
  }
  const zerod::GptLayout layout(*cfg);
  const int64_t n = layout.num_params();
  const int threads = omp_get_max_threads();
  std::vector<float> one = zerod::bench::filled(n, 0), all = zerod::bench::filled(n, 0),
                     parts = zerod::bench::filled(n, 0);
  constexpr int64_t kPart = int64_t{1} << 20;
  std::printf("%s: %lld parameters, %d threads\n", preset.c_str(), static_cast<long long>(n), threads);
  std::printf("%6s %12s %12s %8s %12s %8s\n", "round", "1 thread s", "all s", "speedup", "1M parts s", "speedup");
  for (int r = 0; r < rounds; ++r) {
    double s1 = 0, sn = 0, sp = 0;
    const auto in_parts = [&] {
      omp_set_num_threads(threads);
      zerod::InitCursors cursors;
      sp = zerod::bench::seconds([&] {
        for (int64_t b = 0; b < n; b += kPart) {
          zerod::init_gpt_range(layout, 1, b, std::min(n, b + kPart), parts.data() + b, &cursors);
        }
      });
    };
    zerod::bench::alternate(
        r,
        [&] {
          omp_set_num_threads(1);
          s1 = zerod::bench::seconds([&] { zerod::init_gpt_params(layout, 1, one.data()); });
        },
        [&] {
          omp_set_num_threads(threads);
          sn = zerod::bench::seconds([&] { zerod::init_gpt_params(layout, 1, all.data()); });
          in_parts();
        });
    std::printf("%6d %12.2f %12.2f %7.2fx %12.2f %7.2fx\n", r, s1, sn, s1 / sn, sp, s1 / sp);
    std::fflush(stdout);
  }
  if (std::memcmp(one.data(), all.data(), n * sizeof(float)) != 0 ||
      std::memcmp(one.data(), parts.data(), n * sizeof(float)) != 0) {
    std::fprintf(stderr, "init_throughput: one thread and %d threads drew different bits\n", threads);
    return 1;
  }
  std::printf("the same bits on 1 and %d threads, in one call and in 1M parts\n", threads);
  return 0;
}
