// /metrics' page from made-up jobs and requests, read back by the test's
// own reader of Prometheus' text format (tests/prometheus_text.h) and by
// promtool; the page of a running zerod is in test_coordinator_e2e.cc.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/coordinator/metrics_text.h"
#include "runtime/core/whole_file.h"
#include "tests/prometheus_text.h"
#include "tests/temp_dir.h"

namespace zerod {
namespace {

using testing::parse_prometheus;
using testing::PromPage;

Supervisor::JobMetrics job(const std::string& id, v1::JobState state, int attempts, int64_t step, double loss) {
  Supervisor::JobMetrics m;
  m.job.set_id(id);
  m.job.set_state(state);
  for (int i = 0; i < attempts; ++i) m.job.add_attempts()->set_number(i + 1);
  m.job.mutable_progress()->set_step(step);
  m.job.mutable_progress()->set_total_steps(100);
  m.job.mutable_progress()->set_loss(loss);
  m.job.mutable_progress()->set_tokens_per_s(12345.678901234567);
  return m;
}

// Job 7 running (its memory and heartbeat known), job 8 done after
// evaluating a held-out set.
std::vector<Supervisor::JobMetrics> running_and_evaluated() {
  std::vector<Supervisor::JobMetrics> jobs = {job("7", v1::RUNNING, 2, 42, 2.0000000000000004),
                                              job("8", v1::SUCCEEDED, 1, 100, 0.25)};
  jobs[0].memory = {1ull << 33, 4096, 123456789, 1ull << 40};  // gpu, pinned, host, nvme
  jobs[0].heartbeat_age_s = 0.125;
  jobs[1].job.mutable_progress()->set_eval_loss(1.5000000000000002);
  jobs[1].job.mutable_progress()->set_eval_step(100);
  jobs[1].job.mutable_progress()->set_best_eval_loss(1.25);
  return jobs;
}

TEST(MetricsText, EveryJobsFiguresInPrometheusTextFormat) {
  std::vector<Supervisor::JobMetrics> jobs = running_and_evaluated();
  jobs.push_back(job("9", v1::PENDING, 0, 0, 0));  // no progress, no evaluation
  RequestStats stats;
  stats.record("SubmitJob", "OK", 0.0002);
  stats.record("SubmitJob", "OK", 0.003);
  stats.record("SubmitJob", "INVALID_ARGUMENT", 0.7);
  stats.record("/metrics", "401", 9.0);
  const std::string text = metrics_text(jobs, stats);
  const PromPage page = parse_prometheus(text);
  ASSERT_EQ(page.error, "") << text;
  EXPECT_EQ(page.type.at("zerod_jobs"), "gauge");
  EXPECT_EQ(page.type.at("zerod_job_restarts_total"), "counter");
  EXPECT_EQ(page.type.at("zerod_request_duration_seconds"), "histogram");
  for (const char* s : {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}) {
    const double want = std::string(s) == "FAILED" || std::string(s) == "CANCELLED" ? 0 : 1;
    EXPECT_EQ(page.value("zerod_jobs", {{"state", s}}), want) << s;
    EXPECT_EQ(page.value("zerod_job_state", {{"job", "7"}, {"state", s}}), std::string(s) == "RUNNING") << s;
  }
  EXPECT_EQ(page.value("zerod_job_step", {{"job", "7"}}), 42);
  EXPECT_EQ(page.value("zerod_job_total_steps", {{"job", "8"}}), 100);
  EXPECT_EQ(page.value("zerod_job_loss", {{"job", "7"}}), 2.0000000000000004);  // round-trip digits
  EXPECT_EQ(page.value("zerod_job_tokens_per_second", {{"job", "8"}}), 12345.678901234567);
  EXPECT_TRUE(std::isnan(page.value("zerod_job_step", {{"job", "9"}})));  // no progress yet
  EXPECT_EQ(page.value("zerod_job_eval_loss", {{"job", "8"}}), 1.5000000000000002);
  EXPECT_EQ(page.value("zerod_job_best_eval_loss", {{"job", "8"}}), 1.25);
  EXPECT_EQ(page.count("zerod_job_eval_loss"), 1);  // jobs that evaluated only
  EXPECT_EQ(page.type.at("zerod_job_eval_loss"), "gauge");
  EXPECT_EQ(page.value("zerod_job_memory_bytes", {{"job", "7"}, {"tier", "gpu"}}), 8589934592.0);
  EXPECT_EQ(page.value("zerod_job_memory_bytes", {{"job", "7"}, {"tier", "pinned"}}), 4096);
  EXPECT_EQ(page.value("zerod_job_memory_bytes", {{"job", "7"}, {"tier", "host"}}), 123456789);
  EXPECT_EQ(page.value("zerod_job_memory_bytes", {{"job", "7"}, {"tier", "nvme"}}), 1099511627776.0);
  EXPECT_EQ(page.count("zerod_job_memory_bytes"), 4);  // running jobs only
  EXPECT_EQ(page.value("zerod_job_restarts_total", {{"job", "7"}}), 1);
  EXPECT_EQ(page.value("zerod_job_restarts_total", {{"job", "9"}}), 0);
  EXPECT_EQ(page.value("zerod_job_heartbeat_age_seconds", {{"job", "7"}}), 0.125);
  EXPECT_EQ(page.count("zerod_job_heartbeat_age_seconds"), 1);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "SubmitJob"}, {"code", "OK"}}), 2);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "SubmitJob"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "/metrics"}, {"code", "401"}}), 1);
  // SubmitJob's three latencies in their buckets, cumulatively.
  const auto bucket = [&](const char* le) {
    return page.value("zerod_request_duration_seconds_bucket", {{"method", "SubmitJob"}, {"le", le}});
  };
  EXPECT_EQ(bucket("0.0005"), 1);
  EXPECT_EQ(bucket("0.0025"), 1);
  EXPECT_EQ(bucket("0.005"), 2);
  EXPECT_EQ(bucket("0.5"), 2);
  EXPECT_EQ(bucket("1"), 3);
  EXPECT_EQ(bucket("+Inf"), 3);
  EXPECT_EQ(page.value("zerod_request_duration_seconds_count", {{"method", "SubmitJob"}}), 3);
  EXPECT_NEAR(page.value("zerod_request_duration_seconds_sum", {{"method", "SubmitJob"}}), 0.7032, 1e-12);
  // /metrics' 9 s is past every finite bucket.
  EXPECT_EQ(page.value("zerod_request_duration_seconds_bucket", {{"method", "/metrics"}, {"le", "2.5"}}), 0);
  EXPECT_EQ(page.value("zerod_request_duration_seconds_bucket", {{"method", "/metrics"}, {"le", "+Inf"}}), 1);
}

// Label values carry Prometheus' escapes, and the reader finds the breaches
// the format forbids.
TEST(MetricsText, LabelValuesAreEscapedAndTheReaderCatchesBreaches) {
  EXPECT_EQ(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  RequestStats stats;
  stats.record("odd \"method\"\\\n", "OK", 0.01);
  const PromPage page = parse_prometheus(metrics_text({}, stats));
  ASSERT_EQ(page.error, "");
  EXPECT_EQ(page.value("zerod_requests_total", {{"method", "odd \"method\"\\\n"}}), 1);
  for (const char* bad :
       {"x 1\n", "# TYPE x gauge\nx{a=\"1} 2\n", "# TYPE x gauge\nx 1\nx 2\n",
        "# TYPE x gauge\n# TYPE y gauge\nx 1\ny 1\nx{a=\"b\"} 1\n", "# TYPE x gauge\nx one\n", "# TYPE x gauge\nx 1"}) {
    EXPECT_NE(parse_prometheus(bad).error, "") << bad;
  }
}

// Prometheus' own tool reads the page: `promtool check metrics` finds
// nothing to say about it, and its samples imported into a TSDB block
// (`promtool tsdb create-blocks-from openmetrics`, each given a timestamp)
// and dumped hold the eval losses as written, for the job that evaluated.
class Promtool : public testing::TempDirTest {
 protected:
  // The command's exit status; its output in `out`.
  int run(const std::string& command, std::string& out) {
    const std::string log = path("log.txt");
    const int status = std::system((command + " > " + log + " 2>&1").c_str());
    out = read_whole_file(log).value_or("");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

TEST_F(Promtool, ChecksThePageAndReadsTheEvalLossesBack) {
  RequestStats stats;
  stats.record("SubmitJob", "OK", 0.003);
  const std::string text = metrics_text(running_and_evaluated(), stats);
  std::string out;
  ASSERT_EQ(run("promtool check metrics < " + write("page.txt", text), out), 0) << out;
  EXPECT_EQ(out, "");

  std::string samples;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') samples += line + " 1700000000\n";
  write("page.om", samples + "# EOF\n");
  ASSERT_EQ(run("promtool tsdb create-blocks-from openmetrics " + path("page.om") + " " + path("tsdb"), out), 0)
      << out;
  std::filesystem::create_directories(path("tsdb/wal"));  // dump opens the block as a database
  ASSERT_EQ(run("promtool tsdb dump " + path("tsdb"), out), 0) << out;
  EXPECT_NE(out.find("{__name__=\"zerod_job_eval_loss\", job=\"8\"} 1.5000000000000002 1700000000000\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("{__name__=\"zerod_job_best_eval_loss\", job=\"8\"} 1.25 1700000000000\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("{__name__=\"zerod_job_loss\", job=\"7\"} 2.0000000000000004 1700000000000\n"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("zerod_job_eval_loss\", job=\"7\""), std::string::npos) << out;
}

}  // namespace
}  // namespace zerod
