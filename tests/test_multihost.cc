// Several hosts on one machine (tests/netns_hosts.h: namespaces reached
// over ssh, ranks started on them by mpirun's remote agent): ZeRO's stages
// at 4 ranks over 2 hosts follow the same world on one host, their
// collectives crossing the hosts' links, and a checkpoint saved on 2 hosts
// resumes on 1. Needs root, as CI has, and openssh-server.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/model/gpt_layout.h"
#include "tests/netns_hosts.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

#ifdef ZEROD_WITH_MPI

class MultiHost : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(hosts_.ok()) << "the hosts did not come up (they need root and openssh-server): " << hosts_.error();
  }

  std::string job(const std::string& name, const nlohmann::json& j) const { return write(name + ".json", j.dump()); }

  // Each step's loss, from the JSON events of a run that succeeded.
  static std::vector<double> losses(const testing::CommandResult& r) {
    EXPECT_EQ(r.code, 0) << r.out;
    return testing::step_losses(r.out);
  }

  testing::NetnsHosts hosts_{2};
};

nlohmann::json base_job(int stage, int steps) {
  nlohmann::json j = testing::tiny_job();
  j["run"]["steps"] = steps;
  j["run"]["log_format"] = "json";
  j["run"]["threads"] = 1;
  j["steps_per_print"] = 1;
  j["zero_optimization"] = {{"stage", stage}};
  return j;
}

TEST_F(MultiHost, StagesOverTwoHostsFollowOneHost) {
  const std::vector<std::string> two = {hosts_.host(1) + ":2", hosts_.host(2) + ":2"};
  const int64_t params = GptLayout(testing::config_with(testing::tiny_job(), {}).model).num_params();
  for (int stage : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    const std::string cfg = job("stage" + std::to_string(stage), base_job(stage, 6));
    const uint64_t before1 = hosts_.link_bytes(1), before2 = hosts_.link_bytes(2);
    const std::vector<double> spread = losses(hosts_.mpirun(two, 4, "--config " + cfg));
    const uint64_t moved1 = hosts_.link_bytes(1) - before1, moved2 = hosts_.link_bytes(2) - before2;
    const std::vector<double> local = losses(testing::mpirun(4, "--config " + cfg));
    ASSERT_EQ(local.size(), 6u);
    EXPECT_EQ(spread, local);  // the same world size: the same reductions, bit for bit
    // Each step reduce-scatters the gradients and gathers the parameters
    // across the hosts: far more than the model's fp32 bytes in 6 steps.
    EXPECT_GT(moved1, uint64_t(4 * params)) << moved1;
    EXPECT_GT(moved2, uint64_t(4 * params)) << moved2;
  }
}

TEST_F(MultiHost, ACheckpointSavedOnTwoHostsResumesOnOne) {
  const std::vector<std::string> two = {hosts_.host(1) + ":2", hosts_.host(2) + ":2"};
  nlohmann::json j = base_job(3, 8);
  j["run"]["checkpoint"] = {{"dir", path("ck")}, {"interval", 4}};
  const std::vector<double> whole = losses(hosts_.mpirun(two, 4, "--config " + job("whole", j)));
  ASSERT_EQ(whole.size(), 8u);

  j["run"]["resume"] = path("ck/step-00000004");
  j["run"]["checkpoint"]["dir"] = path("ck-resumed");
  const std::vector<double> resumed = losses(testing::mpirun(4, "--config " + job("resumed", j)));
  EXPECT_EQ(resumed, std::vector<double>(whole.begin() + 4, whole.end()));
}

#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
