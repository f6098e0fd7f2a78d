// zerod end to end on this machine: real zerod, zeroctl and zero-worker
// processes under mpirun, on a free port. Each test waits for a job's
// outcome, never for a length of time; the training numerics are checked
// against the same job run directly with mpirun.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/config/job_config.h"
#include "runtime/coordinator/job_store.h"
#include "runtime/coordinator/launcher.h"
#include "tests/prometheus_text.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"
#include "tests/zerod_process.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using ::zerod::testing::CoordinatorClient;
using ::zerod::testing::rank_pid;
using ::zerod::testing::TempDirTest;
using ::zerod::testing::ZerodProcess;

constexpr char kToken[] = "e2e-token-7f3a9c";

// Small enough to run in a second or two on two CPU ranks, big enough that
// a step takes a few milliseconds.
nlohmann::json small_job(int steps, int checkpoint_interval = 0) {
  nlohmann::json j = {
      {"model", {{"preset", "custom"}, {"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"vocab_size", 256},
                 {"block_size", 64}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 64}, {"seed", 1}}},
      {"run", {{"steps", steps}, {"seed", 3}, {"device", "cpu"}}},
      {"train_batch_size", 8},
      {"steps_per_print", 5},
      {"gradient_clipping", 1.0},
      {"zero_optimization", {{"stage", 2}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.1}}}}}};
  if (checkpoint_interval > 0) j["run"]["checkpoint"] = {{"interval", checkpoint_interval}};
  return j;
}

v1::SubmitJobRequest request(const nlohmann::json& config, int world_size = 2, int max_restarts = 0,
                             double hang_timeout_s = 0) {
  v1::SubmitJobRequest r;
  r.set_name("e2e");
  r.set_config_json(config.dump());
  r.set_world_size(world_size);
  r.mutable_restart()->set_max_restarts(max_restarts);
  r.mutable_restart()->set_hang_timeout_s(hang_timeout_s);
  return r;
}

class ZerodE2E : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    token_file_ = write("token", std::string(kToken) + "\n");
    state_ = path("state");
  }
  void TearDown() override {
    zerod_.reset();
    // Nothing a test started outlives it.
    for (pid_t p : tagged_processes(fs::weakly_canonical(state_).string() + "#")) kill(p, SIGKILL);
    TempDirTest::TearDown();
  }
  // zerod with the test's token, 2 slots, and these options and environment;
  // workers run one OpenMP thread each, as the direct reference runs do.
  // zerod launching the test worker whose rank `rank` of attempt `attempt`
  // stops, still heartbeating, after `step` (tests/hanging_worker.cc).
  void start_zerod_with_hang(const std::string& attempt_rank_step, std::vector<std::string> options = {}) {
    options.insert(options.end(), {"--worker", ZEROD_HANGING_WORKER_BIN});
    start_zerod(options, {"ZEROD_TEST_HANG=" + attempt_rank_step});
  }
  void start_zerod(std::vector<std::string> options = {}, std::vector<std::string> env = {},
                   const std::string& binary = ZEROD_DAEMON_BIN) {
    launch_zerod(options, env, binary);
    ASSERT_TRUE(zerod_->running()) << zerod_->error();
    client_ = std::make_unique<CoordinatorClient>(zerod_->address(), kToken);
  }
  // zerod whose store's disk is full while the file `full` exists
  // (tests/full_disk_zerod.cc).
  void start_full_disk_zerod(const std::string& full) {
    start_zerod({"--worker", ZEROD_WORKER_BIN}, {"ZEROD_TEST_DISK_FULL=" + full}, ZEROD_FULL_DISK_ZEROD_BIN);
  }
  // Starts zerod as start_zerod does, whether or not it comes up.
  void launch_zerod(std::vector<std::string> options = {}, std::vector<std::string> env = {},
                    const std::string& binary = ZEROD_DAEMON_BIN) {
    // The agent beside the test's zerod, whichever zerod it is.
    options.insert(options.end(), {"--token-file", token_file_, "--slots", "2", "--heartbeat-interval", "0.1",
                                   "--agent", ZEROD_AGENT_BIN});
    env.push_back("OMP_NUM_THREADS=1");
    zerod_ = std::make_unique<ZerodProcess>(state_, options, env, 0, binary);
  }
  std::string tag(const std::string& id, int attempt) const {
    return absl::StrCat(fs::canonical(state_).string(), "#", id, "#", attempt);
  }
  std::string job_file(const std::string& id, const std::string& name) const {
    return absl::StrCat(state_, "/jobs/", id, "/", name);
  }
  std::string submit(const v1::SubmitJobRequest& r) {
    std::string id;
    grpc::Status s = client_->submit(r, &id);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return id;
  }
  v1::Job finished(const std::string& id) {
    v1::Job job;
    grpc::Status s = client_->watch(id, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  // Polls until the job's reported progress reaches `step`.
  v1::Job reached(const std::string& id, int64_t step) {
    v1::Job job;
    for (;;) {
      EXPECT_TRUE(client_->get(id, &job).ok());
      if (job.progress().step() >= step || is_terminal(job.state())) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // The final loss of the same job run directly under mpirun.
  // The summary of the job run directly under mpirun, without checkpoints.
  nlohmann::json direct_summary(nlohmann::json config, int world_size) {
    config["run"].erase("checkpoint");
    const std::string file = write("direct.json", config.dump());
    auto r = ::zerod::testing::mpirun(world_size, "--config " + file + " --log-format json");
    EXPECT_EQ(r.code, 0) << r.out;
    auto summary = ::zerod::testing::of_kind(::zerod::testing::events(r.out), "summary");
    EXPECT_EQ(summary.size(), 1u) << r.out;
    return summary.empty() ? nlohmann::json{{"final_loss", 0.0}} : summary[0];
  }
  double direct_loss(const nlohmann::json& config, int world_size) {
    return direct_summary(config, world_size)["final_loss"].get<double>();
  }
  // zeroctl with the test's token: exit status and stdout.
  std::pair<int, std::string> zeroctl(const std::string& args) {
    auto r = ::zerod::testing::run_command(absl::StrCat("ZEROD_TOKEN=", kToken, " ", ZEROD_CTL_BIN, " --address ",
                                                        zerod_->address(), " ", args, " 2>/dev/null"));
    return {r.code, r.out};
  }

  // The port zerod serves HTTP on (--http-listen).
  int http_port() const {
    const std::string a = read_whole_file(state_ + "/zerod.http").value_or(":0");
    return std::stoi(a.substr(a.rfind(':') + 1));
  }
  // GET `path` with headers; the response (null when nothing answered).
  httplib::Result http_get(const std::string& path, const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", http_port());
    return c.Get(path, headers);
  }
  // /metrics with the token, read as Prometheus' text format.
  ::zerod::testing::PromPage metrics() {
    httplib::Result r = http_get("/metrics", {{"Authorization", std::string("Bearer ") + kToken}});
    EXPECT_TRUE(r) << "no answer";
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    ::zerod::testing::PromPage page = ::zerod::testing::parse_prometheus(r->body);
    EXPECT_EQ(page.error, "") << r->body;
    return page;
  }

  std::string token_file_, state_;
  std::unique_ptr<ZerodProcess> zerod_;
  std::unique_ptr<CoordinatorClient> client_;
};

// With a held-out set evaluated every 10 steps: its last loss and the
// best in the job's progress and `zeroctl status`, a direct run's.
TEST_F(ZerodE2E, DemoJobSucceedsWithTheLossOfADirectRun) {
  start_zerod();
  nlohmann::json config = small_job(20, 10);
  config["data"]["eval"] = {{"fraction", 0.1}};
  config["run"]["eval"] = {{"interval", 10}};
  const std::string file = write("job.json", config.dump());
  auto [code, out] = zeroctl("submit " + file + " --np 2 --name demo --wait");
  EXPECT_EQ(code, 0) << out;
  const std::string id = "1";
  EXPECT_EQ(out.rfind("job 1 SUCCEEDED: step 20/20", 0), 0u) << out;
  v1::Job job;
  ASSERT_TRUE(client_->get(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.spec().name(), "demo");
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 20);
  EXPECT_EQ(job.progress().total_steps(), 20);
  const nlohmann::json direct = direct_summary(config, 2);
  EXPECT_EQ(job.progress().loss(), direct["final_loss"]);  // bitwise
  ASSERT_TRUE(job.progress().has_eval_loss());
  EXPECT_EQ(job.progress().eval_loss(), direct["eval_loss"]);
  EXPECT_EQ(job.progress().eval_step(), 20);
  EXPECT_EQ(job.progress().best_eval_loss(), direct["best_eval_loss"]);
  EXPECT_EQ(job.directory(), fs::canonical(path("state/jobs/1")).string());
  // The logs, through the API and through zeroctl, are the rank's file.
  const std::string file_log = read_whole_file(job_file(id, "rank-0.log")).value_or("");
  EXPECT_NE(file_log.find("checkpoint after step 20"), std::string::npos) << file_log;
  std::string streamed;
  ASSERT_TRUE(client_->logs(id, 0, /*follow=*/false, &streamed).ok());
  EXPECT_EQ(streamed, file_log);
  auto [logs_code, logs_out] = zeroctl("logs 1 --rank 0");
  EXPECT_EQ(logs_code, 0);
  EXPECT_EQ(logs_out, file_log);
  auto [status_code, status_out] = zeroctl("--json status 1");
  EXPECT_EQ(status_code, 0);
  EXPECT_EQ(nlohmann::json::parse(status_out)["state"], "SUCCEEDED");
  auto [text_code, text_out] = zeroctl("status 1");
  EXPECT_EQ(text_code, 0);
  EXPECT_NE(text_out.find(absl::StrFormat("eval:       loss %.6f after step 20, best %.6f", job.progress().eval_loss(),
                                          job.progress().best_eval_loss())),
            std::string::npos)
      << text_out;
  auto [list_code, list_out] = zeroctl("list");
  EXPECT_EQ(list_code, 0);
  EXPECT_NE(list_out.find("SUCCEEDED"), std::string::npos) << list_out;
}

TEST_F(ZerodE2E, KilledWorkerRestartsFromTheLatestCheckpoint) {
  // Rank 1 of the first attempt stops after step 25 so that the kill lands
  // mid-run, after the checkpoint of step 20.
  start_zerod_with_hang("1:1:25");
  const nlohmann::json config = small_job(40, 10);
  const std::string id = submit(request(config, 2, /*max_restarts=*/1, /*hang_timeout_s=*/3600));
  reached(id, 25);
  const pid_t victim = rank_pid(tag(id, 1), 1);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const v1::Job job = finished(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  ASSERT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(job.attempts(0).state(), v1::FAILED);
  EXPECT_EQ(job.attempts(1).state(), v1::SUCCEEDED);
  const v1::Failure& f = job.first_failure();
  EXPECT_EQ(f.rank(), 1);
  EXPECT_EQ(f.signal(), SIGKILL);
  EXPECT_FALSE(f.oom());
  EXPECT_NE(f.reason().find("rank 1"), std::string::npos) << f.reason();
  EXPECT_NE(f.reason().find("SIGKILL"), std::string::npos) << f.reason();
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());  // no survivor of the failed attempt
  EXPECT_EQ(job.progress().loss(), direct_loss(config, 2));  // bitwise, as if never interrupted
  const std::string log = read_whole_file(job_file(id, "rank-0.log")).value_or("");
  EXPECT_NE(log.find("----- zerod: attempt 2 (restart 1 of 1) -----"), std::string::npos);
  EXPECT_NE(log.find("after step 20"), std::string::npos) << log;  // resumed from the step-20 checkpoint
  // Rank 1's agent saw its training killed and said so; rank 0, stopped by
  // mpirun, did not fail and says nothing of the kind.
  const std::string killed = read_whole_file(job_file(id, "rank-1.log")).value_or("");
  EXPECT_NE(killed.find("zero-agent: rank 1 was killed by SIGKILL"), std::string::npos) << killed;
  EXPECT_EQ(log.find("was killed by"), std::string::npos) << log;
}

TEST_F(ZerodE2E, HungWorkerIsDetectedAndTheJobRestarted) {
  start_zerod_with_hang("1:1:5");
  const nlohmann::json config = small_job(15);
  const double timeout_s = 3;
  const std::string id = submit(request(config, 2, /*max_restarts=*/1, timeout_s));
  const v1::Job job = finished(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  ASSERT_EQ(job.attempts_size(), 2);
  const v1::Attempt& hung = job.attempts(0);
  EXPECT_EQ(hung.state(), v1::FAILED);
  EXPECT_EQ(hung.failure().rank(), -1);
  EXPECT_NE(hung.failure().reason().find("no progress for"), std::string::npos) << hung.failure().reason();
  EXPECT_NE(hung.failure().reason().find("hang timeout 3 s"), std::string::npos) << hung.failure().reason();
  // Judged only once the timeout had passed.
  EXPECT_GE(hung.ended_unix_ms() - hung.started_unix_ms(), timeout_s * 1000);
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
  EXPECT_EQ(job.progress().loss(), direct_loss(config, 2));
}

TEST_F(ZerodE2E, CancelStopsEveryProcessOfTheJob) {
  // A grace far longer than any test: the cancel finishing shows SIGTERM was enough.
  start_zerod_with_hang("1:1:3", {"--grace", "3600"});
  const std::string id = submit(request(small_job(1000)));
  reached(id, 3);
  ASSERT_FALSE(tagged_processes(tag(id, 1)).empty());
  auto [code, out] = zeroctl("cancel " + id);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "job " + id + " CANCELLED\n");
  EXPECT_TRUE(tagged_processes(tag(id, 1)).empty());
  v1::Job job;
  ASSERT_TRUE(client_->get(id, &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).state(), v1::CANCELLED);
  // A finished job is not cancelled again.
  auto [again, again_out] = zeroctl("cancel " + id);
  EXPECT_EQ(again, 2);
  // A job still waiting for slots is cancelled without running.
}

TEST_F(ZerodE2E, PendingJobsWaitForSlotsAndCancelWithoutRunning) {
  start_zerod_with_hang("1:1:2");
  const std::string first = submit(request(small_job(1000)));
  const std::string second = submit(request(small_job(5)));
  reached(first, 2);
  v1::Job waiting;
  ASSERT_TRUE(client_->get(second, &waiting).ok());
  EXPECT_EQ(waiting.state(), v1::PENDING);  // both slots are taken
  auto [code, out] = zeroctl("cancel " + second);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "job " + second + " CANCELLED\n");
  ASSERT_TRUE(client_->get(second, &waiting).ok());
  EXPECT_EQ(waiting.attempts_size(), 0);
  EXPECT_EQ(zeroctl("cancel " + first).first, 0);
}

TEST_F(ZerodE2E, RestartOfZerodLosesNothing) {
  start_zerod();
  const std::string done = submit(request(small_job(10)));
  const v1::Job before = finished(done);
  ASSERT_EQ(before.state(), v1::SUCCEEDED);
  const std::string done_log = read_whole_file(job_file(done, "rank-0.log")).value_or("");
  ASSERT_FALSE(done_log.empty());

  const nlohmann::json config = small_job(300);
  const std::string running = submit(request(config));
  reached(running, 5);
  zerod_->restart();
  ASSERT_TRUE(zerod_->running()) << zerod_->error();
  client_ = std::make_unique<CoordinatorClient>(zerod_->address(), kToken);

  v1::Job after;
  ASSERT_TRUE(client_->get(done, &after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  std::string streamed;
  ASSERT_TRUE(client_->logs(done, 0, false, &streamed).ok());
  EXPECT_EQ(streamed, done_log);
  // The running job was found again: its workers heartbeat to the new zerod
  // and it finishes in its first attempt.
  const v1::Job job = finished(running);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.progress().step(), 300);
  EXPECT_EQ(job.progress().loss(), direct_loss(config, 2));
  const std::string log = read_whole_file(job_file(running, "rank-0.log")).value_or("");
  EXPECT_NE(log.find("step 300/300"), std::string::npos);
}

TEST_F(ZerodE2E, EveryCallNeedsTheToken) {
  start_zerod();
  for (const std::string& token : {std::string(), std::string("wrong-token"), std::string(kToken) + "x"}) {
    CoordinatorClient c(zerod_->address(), token);
    std::string id;
    EXPECT_EQ(c.submit(request(small_job(5)), &id).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::Job job;
    EXPECT_EQ(c.get("1", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ListJobsResponse list;
    EXPECT_EQ(c.list(&list).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::CancelJobRequest cancel;
    cancel.set_job_id("1");
    EXPECT_EQ(c.stub().CancelJob(c.context().get(), cancel, &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(c.watch("1", &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    std::string text;
    EXPECT_EQ(c.logs("1", 0, true, &text).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    auto workers = v1::WorkerControl::NewStub(*open_channel(zerod_->address(), ""));
    const auto ctx = [&] {
      auto x = std::make_unique<grpc::ClientContext>();
      if (!token.empty()) add_token(*x, token);
      return x;
    };
    v1::RegisterWorkerResponse reg;
    EXPECT_EQ(workers->RegisterWorker(ctx().get(), {}, &reg).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::HeartbeatResponse beat;
    EXPECT_EQ(workers->Heartbeat(ctx().get(), {}, &beat).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    v1::ReportExitResponse exit;
    EXPECT_EQ(workers->ReportExit(ctx().get(), {}, &exit).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->list(&list).ok());
  EXPECT_EQ(list.jobs_size(), 0);  // nothing was submitted
  auto [code, out] = zeroctl("--token-file /dev/null list");
  EXPECT_EQ(code, 2);  // an empty token is bad input
}

TEST_F(ZerodE2E, WithTlsAPlaintextClientIsRefused) {
  const std::string cert = path("cert.pem"), key = path("key.pem");
  const std::string openssl = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
      "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
      key, " -out ", cert, " 2>/dev/null");
  ASSERT_EQ(std::system(openssl.c_str()), 0) << "openssl could not make a test certificate";
  start_zerod({"--tls-cert", cert, "--tls-key", key});
  CoordinatorClient plain(zerod_->address(), kToken);
  v1::ListJobsResponse list;
  EXPECT_EQ(plain.list(&list).error_code(), grpc::StatusCode::UNAVAILABLE);
  CoordinatorClient tls(zerod_->address(), kToken, cert);
  ASSERT_TRUE(tls.list(&list).ok());
  CoordinatorClient tls_without_token(zerod_->address(), "", cert);
  EXPECT_EQ(tls_without_token.list(&list).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The workers reach zerod over TLS too: their progress arrives.
  std::string id;
  ASSERT_TRUE(tls.submit(request(small_job(5)), &id).ok());
  v1::Job job;
  ASSERT_TRUE(tls.watch(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 5);
}

TEST_F(ZerodE2E, BadInputIsRefusedAndNothingLaunched) {
  fs::create_directories(path("allowed"));
  start_zerod({"--allow-root", path("allowed")});
  std::string id;
  v1::SubmitJobRequest malformed = request(small_job(5));
  malformed.set_config_json("{\"model\": ");
  grpc::Status s = client_->submit(malformed, &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("the config is not valid JSON"), std::string::npos) << s.error_message();

  nlohmann::json invalid = small_job(5);
  invalid["train_batch_size"] = 7;  // not a multiple of 2 ranks
  s = client_->submit(request(invalid), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  nlohmann::json as_run = invalid;
  as_run["run"]["checkpoint"] = {{"dir", "checkpoints"}};
  as_run["run"]["resume"] = "latest";
  auto direct = parse_job_config(as_run, 2);
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(s.error_message(), "config: " + std::string(direct.status().message()));

  nlohmann::json outside = small_job(5);
  outside["run"]["checkpoint"] = {{"dir", path("elsewhere/ckpt")}};
  s = client_->submit(request(outside), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("is outside the roots this zerod allows"), std::string::npos);

  s = client_->submit(request(small_job(5), 3), &id);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // 3 ranks, 2 slots

  v1::Job job;
  for (const char* unknown : {"99", "x", ""}) {
    EXPECT_EQ(client_->get(unknown, &job).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(client_->watch(unknown, &job).error_code(), grpc::StatusCode::NOT_FOUND);
    std::string text;
    EXPECT_EQ(client_->logs(unknown, 0, false, &text).error_code(), grpc::StatusCode::NOT_FOUND);
    v1::CancelJobRequest cancel;
    cancel.set_job_id(unknown);
    EXPECT_EQ(client_->stub().CancelJob(client_->context().get(), cancel, &job).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  v1::ListJobsResponse list;
  ASSERT_TRUE(client_->list(&list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
  EXPECT_TRUE(fs::is_empty(path("state/jobs")));

  // zeroctl: bad input is status 2.
  EXPECT_EQ(zeroctl("submit " + path("absent.json")).first, 2);
  EXPECT_EQ(zeroctl("submit " + write("bad.json", "{oops")).first, 2);
  EXPECT_EQ(zeroctl("submit " + write("seven.json", invalid.dump()) + " --np 2").first, 2);
  EXPECT_EQ(zeroctl("status 99").first, 2);
  EXPECT_EQ(zeroctl("list --state DONE").first, 2);
  EXPECT_EQ(zeroctl("frobnicate").first, 2);
  // Configs that are not JSON text of at most 1 MiB in a regular file, and
  // hosts that ssh or mpirun could take for options: status 2, named.
  const auto refused = [&](const std::string& args, const std::string& text) {
    auto r = ::zerod::testing::run_command(
        absl::StrCat("ZEROD_TOKEN=", kToken, " ", ZEROD_CTL_BIN, " --address ", zerod_->address(), " ", args, " 2>&1"));
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_NE(r.out.find(text), std::string::npos) << args << ": " << r.out;
  };
  refused("submit " + write("random.bin", std::string("\xff\xfe\x80 garbage", 11)), "random.bin' is not valid JSON");
  refused("submit " + write("big.json", "{\"x\": \"" + std::string(2 << 20, 'a') + "\"}"),
          "big.json' is 2097161 bytes; a job config is at most 1 MiB");
  refused("submit " + path("state"), "state' is not a regular file");
  refused("submit " + write("fine.json", small_job(1).dump()) + " --host=-oProxyCommand=x",
          "placement host '-oProxyCommand=x' is not 'host' or 'host:slots' (a host starts with a letter or digit)");
  ASSERT_TRUE(client_->list(&list).ok());
  EXPECT_EQ(list.jobs_size(), 0);

  // A rank out of range for a real job.
  ASSERT_TRUE(client_->submit(request(small_job(3)), &id).ok());
  finished(id);
  std::string text;
  EXPECT_EQ(client_->logs(id, 2, false, &text).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ZerodE2E, AFailedJobNamesItsFirstFailure) {
  start_zerod();
  nlohmann::json config = small_job(5);
  config["optimizer"]["params"]["lr"] = 1e30;  // step 2's gradients overflow: a run failure on every rank
  const std::string file = write("job.json", config.dump());
  auto [code, out] = zeroctl("submit " + file + " --np 2 --wait");
  EXPECT_EQ(code, 1) << out;
  v1::Job job;
  ASSERT_TRUE(client_->get("1", &job).ok());
  EXPECT_EQ(job.state(), v1::FAILED);
  ASSERT_EQ(job.attempts_size(), 1);
  const v1::Failure& f = job.first_failure();
  EXPECT_TRUE(f.rank() == 0 || f.rank() == 1) << f.DebugString();
  EXPECT_EQ(f.exit_code(), 1);
  EXPECT_EQ(f.signal(), 0);
  EXPECT_NE(f.reason().find("exited with status 1 (run failure)"), std::string::npos) << f.reason();
  EXPECT_NE(absl::StrJoin(f.last_log_lines(), "\n").find("gradients are not finite at step 2"), std::string::npos)
      << absl::StrJoin(f.last_log_lines(), "\n");
}

// The store's disk fills while a job runs and another waits: zerod shows
// the running job's true end from memory, refuses new jobs without
// recording anything, starts nothing, and once space returns writes the end
// and starts the queued job by itself.
TEST_F(ZerodE2E, AFullStoreKeepsEachEndAndTheQueueResumesByItself) {
  const std::string full = path("disk-full");
  start_full_disk_zerod(full);
  const std::string first = submit(request(small_job(300)));
  const std::string queued = submit(request(small_job(10)));  // 2 slots, 2 ranks each: it waits
  reached(first, 5);
  write("disk-full", "");
  const v1::Job ended = finished(first);
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.DebugString();
  EXPECT_NE(ended.unrecorded().find("full"), std::string::npos) << ended.DebugString();
  ASSERT_EQ(ended.attempts_size(), 1);
  EXPECT_EQ(ended.attempts(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(ended.progress().step(), 300);
  EXPECT_TRUE(tagged_processes(tag(first, 1)).empty());
  std::string refused_id;
  const grpc::Status refused = client_->submit(request(small_job(10)), &refused_id);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_NE(refused.error_message().find("nothing was submitted"), std::string::npos) << refused.error_message();
  v1::Job waiting;
  do {
    ASSERT_TRUE(client_->get(queued, &waiting).ok());
  } while (waiting.unrecorded().empty());
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_NE(waiting.unrecorded().find("cannot start"), std::string::npos) << waiting.unrecorded();
  EXPECT_TRUE(tagged_processes(tag(queued, 1)).empty());
  auto [status_code, status_out] = zeroctl("status " + first);
  EXPECT_EQ(status_code, 0);
  EXPECT_NE(status_out.find("unrecorded: "), std::string::npos) << status_out;

  fs::remove(full);
  const v1::Job next = finished(queued);
  EXPECT_EQ(next.state(), v1::SUCCEEDED) << next.DebugString();
  EXPECT_TRUE(next.unrecorded().empty());
  v1::Job recorded;
  ASSERT_TRUE(client_->get(first, &recorded).ok());
  EXPECT_TRUE(recorded.unrecorded().empty());
  // What was kept in memory is what the store now holds: a new zerod reads it.
  zerod_->restart();
  ASSERT_TRUE(zerod_->running()) << zerod_->error();
  client_ = std::make_unique<CoordinatorClient>(zerod_->address(), kToken);
  v1::Job reread;
  ASSERT_TRUE(client_->get(first, &reread).ok());
  EXPECT_EQ(reread.state(), v1::SUCCEEDED);
  ASSERT_EQ(reread.attempts_size(), 1);
  EXPECT_EQ(reread.attempts(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(reread.progress().SerializeAsString(), ended.progress().SerializeAsString());
  EXPECT_EQ(reread.finished_unix_ms(), ended.finished_unix_ms());
  v1::ListJobsResponse all;
  ASSERT_TRUE(client_->list(&all).ok());
  EXPECT_EQ(all.jobs_size(), 2);  // the refused submit left nothing
}

// A job ends while its zerod cannot record it, and that zerod stops: a
// zerod that cannot write the store refuses to start (exit 2); once it can,
// the job is recorded from the exit records its ranks left, with its true
// end, last step and loss.
TEST_F(ZerodE2E, AJobThatEndedUnrecordedIsJudgedByWhatItsRanksLeft) {
  const std::string full = path("disk-full");
  start_full_disk_zerod(full);
  const nlohmann::json config = small_job(300);
  const std::string id = submit(request(config));
  reached(id, 5);
  write("disk-full", "");
  ASSERT_EQ(finished(id).state(), v1::SUCCEEDED);
  zerod_->stop(SIGTERM);

  launch_zerod({"--worker", ZEROD_WORKER_BIN}, {"ZEROD_TEST_DISK_FULL=" + full}, ZEROD_FULL_DISK_ZEROD_BIN);
  EXPECT_FALSE(zerod_->running());
  EXPECT_EQ(zerod_->exit_status(), 2);
  EXPECT_NE(zerod_->error().find("zerod cannot write it"), std::string::npos) << zerod_->error();

  fs::remove(full);
  start_full_disk_zerod(full);
  v1::Job job;
  ASSERT_TRUE(client_->get(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString();
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().step(), 300);
  EXPECT_EQ(job.progress().total_steps(), 300);
  EXPECT_EQ(job.progress().loss(), direct_loss(config, 2));
  EXPECT_TRUE(job.unrecorded().empty());
  auto [list_code, list_out] = zeroctl("list");
  EXPECT_EQ(list_code, 0);
  EXPECT_NE(list_out.find("300/300"), std::string::npos) << list_out;
  EXPECT_NE(list_out.find(absl::StrFormat("%.4f", job.progress().loss())), std::string::npos) << list_out;
}

// Job directories are never reused: a store that is missing, empty, or
// knows fewer jobs than the state directory holds is refused at start
// (exit 2) and left as it was; the right store starts as before.
TEST_F(ZerodE2E, AStoreThatIsNotTheJobsIsRefusedAtStart) {
  start_zerod();
  const std::string id = submit(request(small_job(5)));
  ASSERT_EQ(finished(id).state(), v1::SUCCEEDED);
  zerod_->stop(SIGTERM);
  const std::string db = state_ + "/zerod.db";
  fs::rename(db, path("kept.db"));
  { ASSERT_TRUE(JobStore::open(path("new.db")).ok()); }
  const auto refused = [&](const std::string& why) {
    launch_zerod();
    EXPECT_FALSE(zerod_->running());
    EXPECT_EQ(zerod_->exit_status(), 2);
    EXPECT_NE(zerod_->error().find(why), std::string::npos) << zerod_->error();
  };
  SCOPED_TRACE("missing");
  refused("zerod.db is missing but job directories up to 1");
  EXPECT_FALSE(fs::exists(db));
  SCOPED_TRACE("empty");
  write("state/zerod.db", "");
  refused("zerod.db is empty but");
  EXPECT_EQ(fs::file_size(db), 0u);
  SCOPED_TRACE("another");
  fs::copy_file(path("new.db"), db, fs::copy_options::overwrite_existing);
  const std::string before = read_whole_file(db).value_or("");
  refused("zerod.db knows jobs up to 0 but");
  EXPECT_EQ(read_whole_file(db).value_or(""), before);

  fs::copy_file(path("kept.db"), db, fs::copy_options::overwrite_existing);
  start_zerod();
  v1::Job job;
  ASSERT_TRUE(client_->get(id, &job).ok());
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(submit(request(small_job(5))), "2");
}

// /metrics while a job runs (rank 1 held after step 5, rank 0 waiting on
// it, both heartbeating) holds the figures GetJob gives, the ranks' memory
// and heartbeats, and zerod's own requests; it needs the token, /healthz
// does not; once cancelled, the job's state follows.
TEST_F(ZerodE2E, MetricsFollowTheJobAndNeedTheToken) {
  start_zerod_with_hang("1:1:5", {"--http-listen", "127.0.0.1:0"});
  // A held-out set evaluated after step 4, before the rank hangs.
  nlohmann::json config = small_job(40);
  config["data"]["eval"] = {{"fraction", 0.1}};
  config["run"]["eval"] = {{"interval", 4}};
  const std::string id = submit(request(config, 2, 0, /*hang_timeout_s=*/3600));
  reached(id, 5);
  const std::map<std::string, std::string> job = {{"job", id}};
  ::zerod::testing::PromPage page;
  // Both ranks' heartbeats with their memory, after the job's progress.
  while ((page = metrics()).value("zerod_job_memory_bytes", {{"job", id}, {"tier", "host"}}) <= 0 ||
         page.value("zerod_requests_total", {{"method", "Heartbeat"}, {"code", "OK"}}) < 2 ||
         std::isnan(page.value("zerod_job_eval_loss", job))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  v1::Job record;
  ASSERT_TRUE(client_->get(id, &record).ok());
  EXPECT_EQ(record.state(), v1::RUNNING);
  EXPECT_EQ(page.value("zerod_job_state", {{"job", id}, {"state", "RUNNING"}}), 1);
  EXPECT_EQ(page.value("zerod_job_state", {{"job", id}, {"state", "PENDING"}}), 0);
  EXPECT_EQ(page.value("zerod_jobs", {{"state", "RUNNING"}}), 1);
  EXPECT_EQ(page.value("zerod_job_step", job), record.progress().step());
  EXPECT_EQ(page.value("zerod_job_total_steps", job), 40);
  EXPECT_EQ(page.value("zerod_job_loss", job), record.progress().loss());
  EXPECT_EQ(page.value("zerod_job_tokens_per_second", job), record.progress().tokens_per_s());
  ASSERT_TRUE(record.progress().has_eval_loss());
  EXPECT_EQ(record.progress().eval_step(), 4);
  EXPECT_EQ(page.value("zerod_job_eval_loss", job), record.progress().eval_loss());
  EXPECT_EQ(page.value("zerod_job_best_eval_loss", job), record.progress().best_eval_loss());
  EXPECT_EQ(page.value("zerod_job_restarts_total", job), 0);
  EXPECT_EQ(page.value("zerod_job_memory_bytes", {{"job", id}, {"tier", "gpu"}}), 0);
  EXPECT_GE(page.value("zerod_job_heartbeat_age_seconds", job), 0);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "SubmitJob"}, {"code", "OK"}}), 1);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "RegisterWorker"}, {"code", "OK"}}), 2);

  // Refused without the token, or with another; the health check is open.
  httplib::Result none = http_get("/metrics");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(none->body.find("zerod_"), std::string::npos);
  httplib::Result wrong = http_get("/metrics", {{"Authorization", "Bearer not-the-token"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(wrong->body, "the bearer token is not this zerod's\n");
  httplib::Result health = http_get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  page = metrics();
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "/metrics"}, {"code", "401"}}), 2);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "/healthz"}, {"code", "200"}}), 1);
  EXPECT_EQ(page.value("zerod_request_duration_seconds_count", {{"method", "/healthz"}}), 1);

  v1::Job cancelled;
  ASSERT_TRUE(client_->cancel(id, &cancelled).ok());
  finished(id);
  page = metrics();
  EXPECT_EQ(page.value("zerod_job_state", {{"job", id}, {"state", "CANCELLED"}}), 1);
  EXPECT_EQ(page.value("zerod_jobs", {{"state", "RUNNING"}}), 0);
  EXPECT_EQ(page.count("zerod_job_memory_bytes"), 0);
  EXPECT_EQ(page.count("zerod_job_heartbeat_age_seconds"), 0);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "CancelJob"}, {"code", "OK"}}), 1);
}

// An HTTP port another process holds stops zerod before it takes any job.
TEST_F(ZerodE2E, AnHttpPortInUseIsRefused) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));
  launch_zerod({"--http-listen", taken});
  EXPECT_FALSE(zerod_->running());
  EXPECT_EQ(zerod_->exit_status(), 2);
  EXPECT_NE(zerod_->error().find("--http-listen: cannot listen on " + taken), std::string::npos) << zerod_->error();
  close(fd);
  launch_zerod({"--http-listen", "127.0.0.1:http"});
  EXPECT_EQ(zerod_->exit_status(), 2);
  EXPECT_NE(zerod_->error().find("--http-listen '127.0.0.1:http' is not host:port"), std::string::npos)
      << zerod_->error();
}

// Clients that send garbage, stop halfway or never finish their request
// neither stop /metrics nor disturb a job: it trains to the loss of a
// direct run.
TEST_F(ZerodE2E, MisbehavingHttpClientsDisturbNothing) {
  start_zerod({"--http-listen", "127.0.0.1:0"});
  const nlohmann::json config = small_job(30);
  const std::string id = submit(request(config));
  const auto connected = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(http_port()));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  };
  std::vector<int> held;
  for (const std::string& bytes : {std::string("GARBAGE\r\n\r\n"), std::string("GET /metrics HTTP/1.1\r\nHost: x"),
                                   std::string("GET /metrics HTTP/1.1\r\nAuthorization: ") + std::string(100000, 'B'),
                                   std::string("\0\xff\x01", 3), std::string()}) {
    const int fd = connected();
    if (!bytes.empty()) EXPECT_GT(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0);
    held.push_back(fd);
  }
  ::zerod::testing::PromPage page = metrics();
  EXPECT_FALSE(std::isnan(page.value("zerod_jobs", {{"state", "RUNNING"}})));
  for (int fd : held) close(fd);
  const v1::Job job = finished(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.progress().loss(), direct_loss(config, 2));
  page = metrics();
  EXPECT_EQ(page.value("zerod_job_state", {{"job", id}, {"state", "SUCCEEDED"}}), 1);
  EXPECT_EQ(page.value("zerod_job_step", {{"job", id}}), 30);
}

// The dashboard in headless Chromium: with the token (given once in the
// address, kept as a cookie) it lists the jobs and draws the running one's
// charts from its series, without a console message; a screenshot is taken.
// Without the token, or with another, nothing of the jobs is shown.
TEST_F(ZerodE2E, TheDashboardShowsJobsAndChartsInABrowserWithTheToken) {
  start_zerod_with_hang("1:1:8", {"--http-listen", "127.0.0.1:0"});
  // Held-out losses after steps 3 and 6, drawn on the loss chart as the
  // heartbeats report them.
  nlohmann::json config = small_job(40);
  config["data"]["eval"] = {{"fraction", 0.1}};
  config["run"]["eval"] = {{"interval", 3}};
  const std::string id = submit(request(config, 2, 0, /*hang_timeout_s=*/3600));
  reached(id, 8);
  const std::string waiting = submit(request(small_job(5)));  // no free slot: PENDING
  httplib::Result api = http_get("/api/jobs/" + id, {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(api);
  ASSERT_EQ(api->status, 200) << api->body;
  const nlohmann::json series = nlohmann::json::parse(api->body)["series"];
  ASSERT_GE(series["step"].size(), 1u);
  EXPECT_EQ(series["step"].back(), 8);
  // Sampled at the heartbeats as the steps are: the last evaluation always.
  const nlohmann::json& evals = series["eval"]["step"];
  ASSERT_GE(evals.size(), 1u);
  EXPECT_EQ(evals.back(), 6);
  EXPECT_EQ(series["eval"]["loss"].size(), evals.size());

  const std::string base = absl::StrCat("http://127.0.0.1:", http_port());
  // Chromium's stderr (with the page's console) into a file; the page's DOM
  // after its script ran, or a screenshot.
  const auto chromium = [&](const std::string& url, const std::string& what) {
    return ::zerod::testing::run_command(
        absl::StrCat("chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=", path("chromium"),
                     " --enable-logging=stderr --v=0 --virtual-time-budget=5000 --window-size=1400,900 ", what, " '",
                     url, "' 2>>", path("chromium.err")));
  };
  const auto shown = chromium(absl::StrCat(base, "/?token=", kToken, "&job=", id), "--dump-dom");
  ASSERT_EQ(shown.code, 0) << read_whole_file(path("chromium.err")).value_or("");
  const std::string& dom = shown.out;
  EXPECT_NE(dom.find("data-ready=\"yes\""), std::string::npos) << dom;
  EXPECT_NE(dom.find("data-errors=\"0\""), std::string::npos) << dom;
  EXPECT_NE(dom.find(absl::StrCat("<tr data-job=\"", id, "\" class=\"selected\"><td>", id, "</td><td>e2e</td>",
                                  "<td class=\"RUNNING\">RUNNING</td><td class=\"num\">8/40</td>")),
            std::string::npos)
      << dom;
  EXPECT_NE(dom.find(absl::StrCat("<tr data-job=\"", waiting, "\"><td>", waiting,
                                  "</td><td>e2e</td><td class=\"PENDING\">PENDING</td>")),
            std::string::npos)
      << dom;
  for (const char* chart : {"loss", "tokens", "memory"}) {
    EXPECT_NE(dom.find(absl::StrCat("<canvas id=\"", chart, "\" data-points=\"", series["step"].size(), "\"")),
              std::string::npos)
        << chart << ": " << dom;
  }
  EXPECT_NE(dom.find(absl::StrCat("data-eval-points=\"", evals.size(), "\"")), std::string::npos) << dom;
  EXPECT_NE(dom.find(absl::StrCat("job ", id, " e2e (RUNNING)")), std::string::npos);
  EXPECT_NE(dom.find("<div id=\"status\"></div>"), std::string::npos) << dom;  // Chart.js was served, nothing failed
  ASSERT_EQ(chromium(absl::StrCat(base, "/?token=", kToken), "--screenshot=" + path("dashboard.png")).code, 0);
  const std::string png = read_whole_file(path("dashboard.png")).value_or("");
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_GT(png.size(), 20000u);  // a table and three charts, not a blank page
  const std::string console = read_whole_file(path("chromium.err")).value_or("");
  EXPECT_EQ(console.find(":CONSOLE("), std::string::npos) << console;

  for (const std::string& url : {base + "/", base + "/?token=not-the-token", base + "/api/jobs"}) {
    const auto refused = chromium(url, "--dump-dom");
    EXPECT_NE(refused.out.find("token"), std::string::npos) << url << ": " << refused.out;
    EXPECT_EQ(refused.out.find("RUNNING"), std::string::npos) << url << ": " << refused.out;
    EXPECT_EQ(refused.out.find("data-job"), std::string::npos) << url;
  }
  for (const char* p : {"/", "/api/jobs", "/chart.js"}) {
    httplib::Result r = http_get(p, {{"Cookie", "zerod_token=not-the-token"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << p;
  }
  httplib::Result missing = http_get("/api/jobs/999", {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

}  // namespace
}  // namespace zerod
