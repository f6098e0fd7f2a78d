// zerod's HTTP side under load: `clients` threads, each with its own
// keep-alive connection and the bearer token, ask for /metrics, /api/jobs
// and the dashboard page (/) in turn while the demo job trains as 2 ranks,
// for `seconds`, each waiting `interval_ms` after every answer (0: none).
// Reports per path: requests, p50/p99/max latency and errors (any error
// fails the benchmark); and the job's tokens/s over the loaded window
// against the same length just before it and just after, without load.
//
// Usage: http_load [clients=200] [seconds=10] [interval_ms=0]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/load_bench.h"
#include "tests/zerod_process.h"

namespace {

using zerod::bench::percentile;
using zerod::bench::Samples;
using zerod::testing::CoordinatorClient;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "bench-token";
constexpr const char* kPaths[] = {"/metrics", "/api/jobs", "/"};

void client_loop(int port, Clock::time_point until, int interval_ms, Samples* out) {
  httplib::Client c("127.0.0.1", port);
  c.set_keep_alive(true);
  const httplib::Headers auth = {{"Authorization", absl::StrCat("Bearer ", kToken)}};
  for (int64_t i = 0; Clock::now() < until; ++i) {
    const int kind = static_cast<int>(i % 3);
    const auto t0 = Clock::now();
    httplib::Result r = c.Get(kPaths[kind], auth);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r && r->status == 200 && !r->body.empty()) {
      out->ms[kind].push_back(ms);
    } else if (out->errors++ == 0) {
      out->first_error = r ? absl::StrCat(kPaths[kind], ": HTTP ", r->status) : httplib::to_string(r.error());
    }
    if (interval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int clients = argc > 1 ? std::atoi(argv[1]) : 200;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10;
  const int interval_ms = argc > 3 ? std::atoi(argv[3]) : 0;
  const zerod::bench::BenchDir dir("zerod_http_", kToken);
  const std::string state = dir.path();
  int code = 0;
  {
    zerod::testing::ZerodProcess zerod(state + "/state",
                                       {"--token-file", dir.token_file(), "--slots", "2", "--http-listen", "127.0.0.1:0"},
                                       {"OMP_NUM_THREADS=1"});
    if (!zerod.running()) {
      fprintf(stderr, "%s\n", zerod.error().c_str());
      return 1;
    }
    const std::string http = zerod::read_whole_file(state + "/state/zerod.http").value_or(":0");
    const int port = std::stoi(http.substr(http.rfind(':') + 1));
    CoordinatorClient admin(zerod.address(), kToken);
    std::string id;
    if (grpc::Status s = admin.submit(zerod::bench::demo_request(), &id); !s.ok()) {
      fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return 1;
    }
    const auto step = [&] {
      zerod::v1::Job job;
      admin.get(id, &job);
      return job.progress().step();
    };
    while (step() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    // The job's steps a second over a window of `seconds`, running `during`.
    const auto steps_per_s = [&](const std::function<void()>& during) {
      const int64_t s0 = step();
      const auto t0 = Clock::now();
      during();
      return static_cast<double>(step() - s0) / std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const auto idle = [&] { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); };
    std::vector<Samples> loaded(clients);
    double elapsed = 0;
    const double before = steps_per_s(idle);
    const double under = steps_per_s([&] {
      const auto t0 = Clock::now();
      const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
      std::vector<std::thread> threads;
      for (int i = 0; i < clients; ++i) threads.emplace_back(client_loop, port, until, interval_ms, &loaded[i]);
      for (std::thread& t : threads) t.join();
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    });
    const double after = steps_per_s(idle);
    const Samples all = zerod::bench::merge(loaded);
    printf("%d clients for %.1f s, %d ms between a client's requests\n", clients, elapsed, interval_ms);
    printf("| path | requests | p50 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- |\n");
    size_t total = 0;
    for (int k = 0; k < 3; ++k) {
      total += all.ms[k].size();
      printf("| %s | %zu | %.2f | %.2f | %.2f |\n", kPaths[k], all.ms[k].size(), percentile(all.ms[k], 0.5),
             percentile(all.ms[k], 0.99), percentile(all.ms[k], 1.0));
    }
    const double tokens = 16.0 * 64;  // the demo's train_batch_size x seq_len
    printf("requests/s: %.0f; errors: %lld%s%s\n", total / elapsed, static_cast<long long>(all.errors),
           all.errors ? ", first: " : "", all.first_error.c_str());
    printf("job tokens/s: before %.0f, under load %.0f (%.3f of before), after %.0f\n", before * tokens, under * tokens,
           before > 0 ? under / before : 0, after * tokens);
    code = all.errors > 0;
    zerod::v1::Job job;
    admin.cancel(id, &job);
    admin.watch(id, &job);
  }
  return code;
}
