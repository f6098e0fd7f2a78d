// What zerod accepts as a job: the request's fields, the config exactly as
// zero-worker checks it, and paths confined to the allowed roots.
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/config/job_config.h"
#include "runtime/coordinator/job_request.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using ::zerod::testing::TempDirTest;
using ::zerod::testing::tiny_job;

class JobRequestTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(path("allowed/data"));
    fs::create_directories(path("elsewhere"));
    rules_.slots = 4;
    rules_.allowed_roots = {fs::canonical(path("allowed")).string()};
  }
  v1::SubmitJobRequest request(const nlohmann::json& config, int world_size = 2) const {
    v1::SubmitJobRequest r;
    r.set_config_json(config.dump());
    r.set_world_size(world_size);
    return r;
  }
  // The refusal's message; fails the test when the request is accepted.
  std::string refusal(const v1::SubmitJobRequest& r) const {
    auto prepared = prepare_job(r, rules_);
    EXPECT_FALSE(prepared.ok());
    if (prepared.ok()) return "";
    EXPECT_EQ(prepared.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(prepared.status().message());
  }
  nlohmann::json with(const std::string& assignment) const {
    nlohmann::json j = tiny_job();
    EXPECT_TRUE(apply_override(j, assignment).ok());
    return j;
  }
  JobRules rules_;
};

TEST_F(JobRequestTest, DefaultsCheckpointsInTheJobDirectoryAndResumeFromTheLatest) {
  auto prepared = prepare_job(request(tiny_job()), rules_);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ((*prepared)["run"]["checkpoint"]["dir"], "checkpoints");
  EXPECT_EQ((*prepared)["run"]["resume"], "latest");
  EXPECT_EQ(checkpoint_root(*prepared), "checkpoints");
  // The rest of the config is the user's, unchanged.
  nlohmann::json expected = tiny_job();
  expected["run"]["checkpoint"] = {{"dir", "checkpoints"}};
  expected["run"]["resume"] = "latest";
  EXPECT_EQ(*prepared, expected);
}

TEST_F(JobRequestTest, KeepsTheUsersCheckpointSettings) {
  nlohmann::json j = with("run.checkpoint={\"dir\":\"mine\",\"interval\":2}");
  auto prepared = prepare_job(request(j), rules_);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ((*prepared)["run"]["checkpoint"]["dir"], "mine");
  EXPECT_EQ((*prepared)["run"]["checkpoint"]["interval"], 2);
}

TEST_F(JobRequestTest, RefusesMalformedJson) {
  v1::SubmitJobRequest r = request(tiny_job());
  r.set_config_json("{\"model\": {");
  EXPECT_NE(refusal(r).find("the config is not valid JSON"), std::string::npos);
  r.set_config_json("[1, 2]");
  EXPECT_EQ(refusal(r), "the config is not a JSON object");
  // A key given twice: the service and the worker must not read different values.
  r.set_config_json(R"({"model": {"preset": "gpt2-tiny"}, "train_batch_size": 4, "train_batch_size": 8})");
  EXPECT_EQ(refusal(r), "the config is not valid JSON: duplicate key 'train_batch_size' in the top level");
}

TEST_F(JobRequestTest, ConfigErrorsAreZeroWorkersOwn) {
  for (const char* bad : {"train_batch_size=7", "optimizer.type=\"Lion\"", "model.n_layer=0",
                          "zero_optimization.stage=5", "unknown_key=1"}) {
    nlohmann::json j = with(bad);
    // The reference: the message zero-worker's parser gives the same config.
    nlohmann::json as_run = j;
    as_run["run"]["checkpoint"] = {{"dir", "checkpoints"}};
    as_run["run"]["resume"] = "latest";
    auto direct = parse_job_config(as_run, 2);
    ASSERT_FALSE(direct.ok()) << bad;
    EXPECT_EQ(refusal(request(j)), "config: " + std::string(direct.status().message())) << bad;
  }
}

TEST_F(JobRequestTest, ConfinesAbsolutePathsToTheAllowedRoots) {
  const std::string inside = fs::canonical(path("allowed")).string();
  const std::string outside = fs::canonical(path("elsewhere")).string();
  EXPECT_TRUE(prepare_job(request(with("run.checkpoint.dir=\"" + inside + "/ckpt\"")), rules_).ok());
  EXPECT_TRUE(prepare_job(request(with("data={\"kind\":\"text\",\"path\":\"" + inside + "/data/*.txt\"}")), rules_)
                  .ok());
  const std::string msg = refusal(request(with("run.checkpoint.dir=\"" + outside + "/ckpt\"")));
  EXPECT_NE(msg.find("run.checkpoint.dir '" + outside + "/ckpt' is outside the roots this zerod allows"),
            std::string::npos)
      << msg;
  EXPECT_NE(refusal(request(with("model.init_from=\"/etc/passwd\""))).find("model.init_from"), std::string::npos);
  EXPECT_NE(refusal(request(with("data={\"kind\":\"tokens\",\"path\":\"/tmp/*.bin\"}"))).find("data.path"),
            std::string::npos);
  // A held-out set is read as the data is.
  const std::string held = "data={\"kind\":\"text\",\"path\":\"" + inside + "/data/*.txt\",\"eval\":{\"path\":\"";
  EXPECT_TRUE(prepare_job(request(with(held + inside + "/held.txt\"}}")), rules_).ok());
  EXPECT_NE(refusal(request(with(held + "/etc/passwd\"}}"))).find("data.eval.path '/etc/passwd' is outside"),
            std::string::npos);
  EXPECT_NE(refusal(request(with(held + "../held.txt\"}}"))).find("data.eval.path '../held.txt': '..'"),
            std::string::npos);
  // So is each of data.sources.
  const std::string sources = "data={\"kind\":\"text\",\"sources\":[{\"path\":\"" + inside +
                              "/data/*.txt\",\"weight\":1},{\"weight\":1,\"path\":\"";
  EXPECT_TRUE(prepare_job(request(with(sources + inside + "/more.txt\"}]}")), rules_).ok());
  EXPECT_NE(refusal(request(with(sources + "/etc/passwd\"}]}"))).find("data.sources[1].path '/etc/passwd' is outside"),
            std::string::npos);
  // The monitors write under output_path/job_name, a job name with '..' too.
  EXPECT_TRUE(prepare_job(request(with("tensorboard={\"enabled\":true,\"output_path\":\"" + inside + "\"}")), rules_)
                  .ok());
  EXPECT_TRUE(prepare_job(request(with("csv_monitor={\"enabled\":true,\"output_path\":\"runs\"}")), rules_).ok());
  EXPECT_NE(refusal(request(with("run.tensorboard_dir=\"" + outside + "/tb\"")))
                .find("run.tensorboard_dir '" + outside + "/tb' is outside the roots this zerod allows"),
            std::string::npos);
  EXPECT_NE(refusal(request(with("tensorboard={\"enabled\":true,\"output_path\":\"" + outside + "\"}")))
                .find("tensorboard '" + outside + "/DeepSpeedJobName' is outside"),
            std::string::npos);
  EXPECT_NE(refusal(request(with("csv_monitor={\"enabled\":true,\"job_name\":\"../../x\"}"))).find("'..'"),
            std::string::npos);
  // A link inside a root that points out of it is judged by where it points.
  fs::create_directory_symlink(outside, path("allowed/escape"));
  EXPECT_NE(refusal(request(with("run.checkpoint.dir=\"" + inside + "/escape/ckpt\""))).find("outside"),
            std::string::npos);
  // No roots at all: only the job's own directory.
  rules_.allowed_roots.clear();
  EXPECT_NE(refusal(request(with("run.checkpoint.dir=\"" + inside + "/ckpt\""))).find("--allow-root"),
            std::string::npos);
}

TEST_F(JobRequestTest, RelativePathsStayInTheJobDirectory) {
  EXPECT_TRUE(prepare_job(request(with("run.checkpoint.dir=\"sub/ckpt\"")), rules_).ok());
  EXPECT_EQ(refusal(request(with("run.checkpoint.dir=\"../../ckpt\""))),
            "run.checkpoint.dir '../../ckpt': '..' is not allowed in a job's paths");
  EXPECT_NE(refusal(request(with("data={\"kind\":\"text\",\"path\":\"a/../../*.txt\"}"))).find("'..'"),
            std::string::npos);
}

// A model whose shape is its Hugging Face config.json: read at submission
// only under an allowed root (never outside one, even to say whether it
// exists); a relative directory (the job's, made at launch) needs the shape
// given.
TEST_F(JobRequestTest, TakesAModelsShapeFromItsConfigJsonOnlyUnderAnAllowedRoot) {
  const std::string fixture = std::string(ZEROD_SOURCE_DIR) + "/tests/fixtures/hf_llama/llama";
  fs::copy(fixture, path("allowed/llama"));
  nlohmann::json j = tiny_job();
  j["model"] = {{"init_from", fs::canonical(path("allowed/llama")).string()}, {"block_size", 32}};
  auto prepared = prepare_job(request(j), rules_);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ((*prepared)["model"]["arch"], "llama");
  EXPECT_EQ((*prepared)["model"]["n_kv_head"], 2);
  EXPECT_EQ((*prepared)["model"]["block_size"], 32);  // given, so kept
  j["model"]["init_from"] = fixture;  // outside the roots
  EXPECT_NE(refusal(request(j)).find("is outside the roots"), std::string::npos);
  j["model"]["init_from"] = "llama";
  EXPECT_NE(refusal(request(j)).find("takes the model's shape from its config.json only by an absolute path"),
            std::string::npos);
  j["model"]["preset"] = "llama-tiny";  // the shape given: the directory is read at launch
  EXPECT_TRUE(prepare_job(request(j), rules_).ok());
}

TEST_F(JobRequestTest, RefusesBadRequestFields) {
  EXPECT_EQ(refusal(request(tiny_job(), 0)), "world_size is 0; a job has at least 1 rank");
  EXPECT_EQ(refusal(request(tiny_job(), 5)), "the job asks for 5 ranks but this zerod runs at most 4 (--slots)");
  v1::SubmitJobRequest r = request(tiny_job());
  r.mutable_placement()->add_hosts("node1:x");
  EXPECT_EQ(refusal(r),
            "placement host 'node1:x' is not 'host' or 'host:slots' (a host starts with a letter or digit)");
  r = request(tiny_job());
  r.mutable_placement()->add_hosts("node1; rm -rf /");
  EXPECT_NE(refusal(r).find("is not 'host' or 'host:slots'"), std::string::npos);
  r = request(tiny_job());
  r.mutable_restart()->set_max_restarts(-1);
  EXPECT_EQ(refusal(r), "max_restarts is -1; it is 0 to 100");
  r = request(tiny_job());
  r.mutable_restart()->set_hang_timeout_s(-3);
  EXPECT_NE(refusal(r).find("hang_timeout_s"), std::string::npos);
  r = request(tiny_job());
  r.set_name(std::string("a\nb"));
  EXPECT_EQ(refusal(r), "a job name is printable text");
  // A host an ssh or mpirun would read as an option.
  for (const char* host : {"-oProxyCommand=touch /tmp/x", "-np", ".hidden", "_x"}) {
    r = request(tiny_job());
    r.mutable_placement()->add_hosts(host);
    EXPECT_EQ(refusal(r), absl::StrCat("placement host '", host,
                                       "' is not 'host' or 'host:slots' (a host starts with a letter or digit)"));
  }
  // More ranks than the hosts' slots, a host without slots counting one.
  r = request(tiny_job(), 4);
  r.mutable_placement()->add_hosts("node1:2");
  r.mutable_placement()->add_hosts("node2");
  EXPECT_EQ(refusal(r), "the job asks for 4 ranks but its hosts give 3 slots (node1:2, node2; a host without "
                        "':slots' runs one)");
  r.mutable_placement()->add_hosts("node3");
  EXPECT_TRUE(prepare_job(r, rules_).ok());
  // A config past the size limit, however well formed.
  nlohmann::json big = tiny_job();
  big["padding_is_unknown"] = std::string(kMaxConfigBytes, 'a');
  EXPECT_EQ(refusal(request(big)).rfind("the config is ", 0), 0u) << refusal(request(big));
  EXPECT_NE(refusal(request(big)).find("; a job config is at most 1048576 (1 MiB)"), std::string::npos);
  v1::SubmitJobRequest ok = request(tiny_job());
  ok.mutable_placement()->add_hosts("node-1.example:2");
  EXPECT_TRUE(prepare_job(ok, rules_).ok());
}

}  // namespace
}  // namespace zerod
