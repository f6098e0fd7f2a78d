// zerod under load: 200 clients, each on its own connection, calling
// GetJob, ListJobs and StreamLogs (rank 0's whole log) in turn against a
// running 2-rank job for a fixed time. Reports calls, errors, and p50/p99
// latency per call kind; the reference, measured in the same run, is the
// same calls from one client alone.
//
// Before that, heartbeats as a worker sends them, every 10 ms: first for 5 s
// beside the running job alone (the reference), then while 10 more 2-rank
// jobs are submitted, launched and cancelled one after another (churn:
// spawns, /proc scans, signals and store writes in zerod).
//
// Usage: coordinator_load [clients=200] [seconds=10]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/load_bench.h"
#include "proto/zerod.grpc.pb.h"
#include "tests/zerod_process.h"

namespace {

using zerod::bench::merge;
using zerod::bench::percentile;
using zerod::bench::Samples;
using zerod::testing::CoordinatorClient;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "bench-token";
constexpr const char* kKinds[] = {"GetJob", "ListJobs", "StreamLogs"};

// Calls in turn until `until`, or `max_calls`, whichever comes first.
void client_loop(const std::string& address, const std::string& id, Clock::time_point until, int64_t max_calls,
                 Samples* out) {
  CoordinatorClient c(address, kToken);
  for (int64_t i = 0; i < max_calls && Clock::now() < until; ++i) {
    const int kind = static_cast<int>(i % 3);
    const auto t0 = Clock::now();
    grpc::Status s;
    if (kind == 0) {
      zerod::v1::Job job;
      s = c.get(id, &job);
    } else if (kind == 1) {
      zerod::v1::ListJobsResponse list;
      s = c.list(&list);
    } else {
      std::string text;
      s = c.logs(id, 0, /*follow=*/false, &text);
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (s.ok()) {
      out->ms[kind].push_back(ms);
    } else if (out->errors++ == 0) {
      out->first_error = s.error_message();
    }
  }
}

// Heartbeats for an attempt zerod does not run (so no job is touched; the
// call takes the same path and lock as a real one) until `stop`.
void heartbeat_loop(const std::string& address, const std::atomic<bool>& stop, std::vector<double>* ms,
                    int64_t* errors) {
  auto stub = zerod::v1::WorkerControl::NewStub(*zerod::open_channel(address, ""));
  zerod::v1::HeartbeatRequest req;
  req.mutable_worker()->set_job_id("0");
  req.mutable_worker()->set_attempt(1);
  req.mutable_progress()->set_step(1);
  while (!stop) {
    grpc::ClientContext ctx;
    zerod::add_token(ctx, kToken);
    zerod::v1::HeartbeatResponse resp;
    const auto t0 = Clock::now();
    const grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
    if (s.ok()) {
      ms->push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    } else {
      ++*errors;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int clients = argc > 1 ? std::atoi(argv[1]) : 200;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 10;
  const zerod::bench::BenchDir dir("zerod_load_", kToken);
  const std::string state = dir.path();
  int code = 0;
  {
    zerod::testing::ZerodProcess zerod(state + "/state", {"--token-file", dir.token_file(), "--slots", "4"},
                                       {"OMP_NUM_THREADS=1"});
    if (!zerod.running()) {
      fprintf(stderr, "%s\n", zerod.error().c_str());
      return 1;
    }
    CoordinatorClient admin(zerod.address(), kToken);
    const zerod::v1::SubmitJobRequest req = zerod::bench::demo_request();
    std::string id;
    if (grpc::Status s = admin.submit(req, &id); !s.ok()) {
      fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return 1;
    }
    // Until the job is training, so its log grows and progress moves.
    for (zerod::v1::Job job; admin.get(id, &job).ok() && job.progress().step() < 5;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::vector<double> beats[2];
    int64_t beat_errors = 0;
    for (int churn = 0; churn < 2; ++churn) {
      std::atomic<bool> stop{false};
      std::thread beating(heartbeat_loop, zerod.address(), std::cref(stop), &beats[churn], &beat_errors);
      if (!churn) std::this_thread::sleep_for(std::chrono::seconds(5));
      for (int j = 0; churn && j < 10; ++j) {
        std::string other;
        if (grpc::Status s = admin.submit(req, &other); !s.ok()) {
          fprintf(stderr, "submit: %s\n", s.error_message().c_str());
          return 1;
        }
        zerod::v1::Job job;
        while (admin.get(other, &job).ok() && job.state() == zerod::v1::PENDING) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        zerod::v1::CancelJobRequest cancel;
        cancel.set_job_id(other);
        admin.stub().CancelJob(admin.context().get(), cancel, &job);
        admin.watch(other, &job);
      }
      stop = true;
      beating.join();
    }
    printf("| heartbeats | calls | p50 ms | p99 ms | max ms |\n| --- | --- | --- | --- | --- |\n");
    for (int churn = 0; churn < 2; ++churn) {
      printf("| %s | %zu | %.2f | %.2f | %.2f |\n", churn ? "10 jobs launched and cancelled" : "one job running",
             beats[churn].size(), percentile(beats[churn], 0.5), percentile(beats[churn], 0.99),
             percentile(beats[churn], 1.0));
    }
    std::vector<Samples> alone(1);
    client_loop(zerod.address(), id, Clock::now() + std::chrono::hours(1), 300, &alone[0]);
    std::vector<Samples> loaded(clients);
    std::vector<std::thread> threads;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    const auto t0 = Clock::now();
    for (int i = 0; i < clients; ++i) {
      threads.emplace_back(client_loop, zerod.address(), id, until, INT64_MAX, &loaded[i]);
    }
    for (std::thread& t : threads) t.join();
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const Samples a = merge(alone), l = merge(loaded);
    zerod::v1::Job job;
    admin.get(id, &job);
    printf("running job %s at step %lld; %d clients for %.1f s\n", id.c_str(),
           static_cast<long long>(job.progress().step()), clients, elapsed);
    printf("| call | calls | p50 ms | p99 ms | alone p50 ms | alone p99 ms | p99 ratio |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int k = 0; k < 3; ++k) {
      const double a99 = percentile(a.ms[k], 0.99), l99 = percentile(l.ms[k], 0.99);
      printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f | %.1fx |\n", kKinds[k], l.ms[k].size(), percentile(l.ms[k], 0.5), l99,
             percentile(a.ms[k], 0.5), a99, a99 > 0 ? l99 / a99 : 0);
    }
    printf("calls/s under load: %.0f\n", (l.ms[0].size() + l.ms[1].size() + l.ms[2].size()) / elapsed);
    printf("errors: %lld%s%s\n", static_cast<long long>(l.errors + a.errors + beat_errors),
           l.errors + a.errors ? ", first: " : "", (l.first_error.empty() ? a.first_error : l.first_error).c_str());
    code = l.errors + a.errors + beat_errors > 0;
    zerod::v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    admin.stub().CancelJob(admin.context().get(), cancel, &job);
    admin.watch(id, &job);
  }
  return code;
}
