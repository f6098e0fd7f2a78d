// zero-worker for the coordinator tests, with one fault:
// ZEROD_TEST_HANG="attempt:rank:step" makes that rank of that attempt stop
// after that step, still heartbeating (a worker stuck in a collective, as
// zerod sees it); "attempt:rank:step:bytes" makes it take and touch that
// much more memory there instead (for the OOM killer to end it), and fail
// if it survives.
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
  int64_t step = 0, bytes = 0;
  if ((f.size() != 3 && f.size() != 4) || !absl::SimpleAtoi(f[0], &attempt) || !absl::SimpleAtoi(f[1], &rank) ||
      !absl::SimpleAtoi(f[2], &step) || (f.size() == 4 && (!absl::SimpleAtoi(f[3], &bytes) || bytes <= 0))) {
    std::cerr << "hanging-worker: ZEROD_TEST_HANG must be attempt:rank:step or attempt:rank:step:bytes\n";
    return 2;
  }
  return zerod::run_supervised_worker(argc, argv, std::cout, std::cerr, [=](int a, int r, int64_t s) {
    if (a != attempt || r != rank || s != step) return;
    if (bytes > 0) {
      std::fprintf(stderr, "hanging-worker: rank %d takes %lld bytes after step %lld\n", r,
                   static_cast<long long>(bytes), static_cast<long long>(s));
      // Every page written, through volatile so that none is left out.
      volatile char* p = static_cast<volatile char*>(std::malloc(bytes));
      for (int64_t i = 0; p && i < bytes; i += 4096) p[i] = 1;
      std::fprintf(stderr, "hanging-worker: rank %d was not stopped\n", r);
      std::_Exit(3);
    }
    std::fprintf(stderr, "hanging-worker: rank %d hangs after step %lld\n", r, static_cast<long long>(s));
    for (;;) pause();
  });
}
