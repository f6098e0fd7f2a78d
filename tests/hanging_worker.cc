// zero-worker for the coordinator tests, with one fault:
// ZEROD_TEST_HANG="attempt:rank:step" makes that rank of that attempt stop
// after that step, still heartbeating (a worker stuck in a collective, as
// zerod sees it).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/coordinator/worker_agent.h"

int main(int argc, char** argv) {
  const char* spec = std::getenv("ZEROD_TEST_HANG");
  const std::vector<std::string> f = absl::StrSplit(spec ? spec : "", ':');
  int attempt = 0, rank = 0;
  int64_t step = 0;
  if (f.size() != 3 || !absl::SimpleAtoi(f[0], &attempt) || !absl::SimpleAtoi(f[1], &rank) ||
      !absl::SimpleAtoi(f[2], &step)) {
    std::cerr << "hanging-worker: ZEROD_TEST_HANG must be attempt:rank:step\n";
    return 2;
  }
  return zerod::run_supervised_worker(argc, argv, std::cout, std::cerr, [=](int a, int r, int64_t s) {
    if (a != attempt || r != rank || s != step) return;
    std::fprintf(stderr, "hanging-worker: rank %d hangs after step %lld\n", r, static_cast<long long>(s));
    for (;;) pause();
  });
}
