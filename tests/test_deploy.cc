// deploy/ run as a user runs it: the Slurm batch script under a single-node
// Slurm started here (scripts/slurm_local.sh), and the Kubernetes MPIJob's
// launcher command on the job config its ConfigMap holds, each against the
// same job under plain mpirun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/core/whole_file.h"
#include "tests/deploy_files.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

#ifdef ZEROD_WITH_MPI

using testing::mount_path;
using testing::source_path;
using testing::volume;

nlohmann::json demo_job(int steps) {
  nlohmann::json j = nlohmann::json::parse(*read_whole_file(source_path("examples/demo.json")));
  j["run"]["steps"] = steps;
  j["run"]["log_format"] = "json";
  j["run"]["threads"] = 1;
  j["steps_per_print"] = 1;
  return j;
}

class SlurmDeploy : public testing::TempDirTest {
 protected:
  void TearDown() override {
    testing::run_command("bash " + source_path("scripts/slurm_local.sh") + " stop " + path("slurm"));
    TempDirTest::TearDown();
  }
};

// deploy/slurm/train.sbatch, submitted with sbatch to a slurmctld and
// slurmd on this machine (one node, two tasks): srun starts the ranks, they
// find each other through PMIx, and the run is the mpirun run of the same
// job, loss for loss.
TEST_F(SlurmDeploy, TheBatchScriptTrainsAsMpirunDoes) {
  const int port = 20000 + 2 * (getpid() % 10000);
  const testing::CommandResult up = testing::run_command(
      absl::StrCat("bash ", source_path("scripts/slurm_local.sh"), " start ", path("slurm"), " ", port, " 2>&1"));
  if (up.code != 0) GTEST_SKIP() << "Slurm could not start here: " << up.out;

  const std::string job = write("job.json", demo_job(12).dump());
  const std::string out = path("slurm-out.txt");
  const testing::CommandResult batch = testing::run_command(absl::StrCat(
      "SLURM_CONF=", path("slurm/slurm.conf"), " ZEROD_CONFIG=", job, " ZEROD_WORKER=", ZEROD_WORKER_BIN,
      " sbatch --wait --nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1 --output=", out,
      " --chdir=", dir_.string(), " ", source_path("deploy/slurm/train.sbatch"), " 2>&1"));
  const std::string output = read_whole_file(out).value_or("");
  ASSERT_EQ(batch.code, 0) << batch.out << output;
  EXPECT_NE(output.find("2 ranks on 1 node(s)"), std::string::npos) << output;

  const testing::CommandResult mpirun = testing::mpirun(2, "--config " + job);
  ASSERT_EQ(mpirun.code, 0) << mpirun.out;
  const std::vector<double> want = testing::step_losses(mpirun.out);
  ASSERT_EQ(want.size(), 12u);
  EXPECT_EQ(testing::step_losses(output), want);
}

// deploy/kubernetes/mpijob.yaml: mpirun's -np is the worker pods' slots,
// the config it names is the ConfigMap's job.json where the pods mount it,
// and the launcher's command, run here on deploy/kubernetes/job.json,
// trains as that many ranks.
class KubernetesDeploy : public testing::TempDirTest {};

TEST_F(KubernetesDeploy, TheMpiJobLaunchesItsConfigMapsJob) {
  const nlohmann::json job =
      testing::document_of_kind(testing::yaml_documents(source_path("deploy/kubernetes/mpijob.yaml")), "MPIJob");
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v2beta1");
  const nlohmann::json& replicas = job["spec"]["mpiReplicaSpecs"];
  const int ranks = job["spec"]["slotsPerWorker"].get<int>() * replicas["Worker"]["replicas"].get<int>();
  const nlohmann::json& pod = replicas["Launcher"]["template"]["spec"];
  const nlohmann::json& launcher = pod["containers"][0];
  const std::vector<std::string> argv = launcher["command"];
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "mpirun");
  EXPECT_EQ(testing::flag_value(argv, "-np"), std::to_string(ranks));
  EXPECT_EQ(volume(pod, "job")["configMap"]["name"], "zerod-job");
  EXPECT_EQ(testing::flag_value(argv, "--config"), mount_path(launcher, "job") + "/job.json");
  const nlohmann::json& worker = replicas["Worker"]["template"]["spec"];
  EXPECT_EQ(mount_path(worker["containers"][0], "job"), mount_path(launcher, "job"));

  // The same command here: this build's programs, the file the ConfigMap is
  // made from, a short run with its checkpoint in the test's directory.
  std::vector<std::string> cmd;
  for (const std::string& a : argv) {
    if (a == "mpirun") {
      cmd.push_back(absl::StrCat(ZEROD_MPIEXEC, " --oversubscribe"));
    } else if (a == "zero-worker") {
      cmd.push_back(ZEROD_WORKER_BIN);
    } else if (a == testing::flag_value(argv, "--config")) {
      cmd.push_back(source_path("deploy/kubernetes/job.json"));
    } else {
      cmd.push_back(a);
    }
  }
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const testing::CommandResult r = testing::run_command(
      absl::StrCat(absl::StrJoin(cmd, " "), " --set run.steps=2 --set steps_per_print=1",
                   " --set run.log_format='\"json\"' --set run.checkpoint.dir='\"", path("ck"), "\"' 2>&1"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<nlohmann::json> starts = testing::of_kind(testing::events(r.out), "start");
  ASSERT_EQ(starts.size(), 1u) << r.out;
  EXPECT_EQ(starts[0]["world_size"], ranks) << starts[0].dump();
  EXPECT_EQ(testing::step_losses(r.out).size(), 2u);
}

#endif  // ZEROD_WITH_MPI

}  // namespace
}  // namespace zerod
