// Random initialisation of a GPT's parameters (init_gpt_range) on one
// thread, as it ran before it was split into pieces, and on all of the
// host's threads, alternated, with the bits of both compared: the part of
// a job's start that grows with the model (gpt2-xl: 1.56B normal draws).
//
//   build/bench/init_throughput [preset=gpt2] [rounds=2]
#include <omp.h>

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
  std::vector<float> one = zerod::bench::filled(n, 0), all = zerod::bench::filled(n, 0);
  std::printf("%s: %lld parameters, %d threads\n", preset.c_str(), static_cast<long long>(n), threads);
  std::printf("%6s %14s %14s %9s\n", "round", "1 thread s", "all s", "speedup");
  for (int r = 0; r < rounds; ++r) {
    double s1 = 0, sn = 0;
    zerod::bench::alternate(
        r,
        [&] {
          omp_set_num_threads(1);
          s1 = zerod::bench::seconds([&] { zerod::init_gpt_params(layout, 1, one.data()); });
        },
        [&] {
          omp_set_num_threads(threads);
          sn = zerod::bench::seconds([&] { zerod::init_gpt_params(layout, 1, all.data()); });
        });
    std::printf("%6d %14.2f %14.2f %8.2fx\n", r, s1, sn, s1 / sn);
    std::fflush(stdout);
  }
  if (std::memcmp(one.data(), all.data(), n * sizeof(float)) != 0) {
    std::fprintf(stderr, "init_throughput: one thread and %d threads drew different bits\n", threads);
    return 1;
  }
  std::printf("the same bits on 1 and %d threads\n", threads);
  return 0;
}
