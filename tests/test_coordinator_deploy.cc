// deploy/'s ways of running zerod itself, checked as installed: the systemd
// unit (systemd-analyze verify on the programs `cmake --install` puts in a
// prefix, its hardening rated, and zerod serving with the unit's own command
// line), and the Kubernetes Deployment (zerod serving with its container's
// command, the paths where its volumes mount).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "runtime/core/whole_file.h"
#include "tests/deploy_files.h"
#include "tests/temp_dir.h"
#include "tests/zerod_process.h"

namespace zerod {
namespace {

using testing::mount_path;
using testing::source_path;
using testing::volume;

class DeployZerod : public testing::TempDirTest {
 protected:
  // Starts zerod with `argv` (its own name first), whose --state-dir and
  // --listen the test's replace; `paths` maps the deployment's paths to
  // this test's. Then a client with `token` lists the jobs.
  void expect_serves(std::vector<std::string> argv, const std::vector<std::pair<std::string, std::string>>& paths,
                     const std::string& binary, const std::string& token) {
    std::vector<std::string> options;
    for (size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] == "--state-dir" || argv[i] == "--listen") {
        ++i;
        continue;
      }
      options.push_back(absl::StrReplaceAll(argv[i], paths));
    }
    testing::ZerodProcess zerod(path("state"), options, {}, 0, binary);
    ASSERT_TRUE(zerod.running()) << zerod.error();
    testing::CoordinatorClient client(zerod.address(), token);
    v1::ListJobsResponse jobs;
    const grpc::Status s = client.list(&jobs);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(jobs.jobs_size(), 0);
  }
};

// ExecStart, its continuation lines joined, split into words.
std::vector<std::string> exec_start(const std::string& unit) {
  std::string joined;
  bool in_exec = false;
  for (absl::string_view line : absl::StrSplit(unit, '\n')) {
    if (absl::StartsWith(line, "ExecStart=")) {
      in_exec = true;
      line.remove_prefix(10);
    }
    if (!in_exec) continue;
    const bool continues = absl::EndsWith(line, "\\");
    if (continues) line.remove_suffix(1);
    absl::StrAppend(&joined, line, " ");
    if (!continues) break;
  }
  return absl::StrSplit(joined, ' ', absl::SkipWhitespace());
}

TEST_F(DeployZerod, TheSystemdUnitVerifiesAndServes) {
  const std::string prefix = path("prefix");
  const testing::CommandResult install =
      testing::run_command("cmake --install " + std::string(ZEROD_BUILD_DIR) + " --prefix " + prefix + " 2>&1");
  ASSERT_EQ(install.code, 0) << install.out;

  const std::string unit = *read_whole_file(source_path("deploy/systemd/zerod.service"));
  const std::vector<std::string> argv = exec_start(unit);
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "/usr/local/bin/zerod");
  // The unit as installed under this prefix.
  const std::string here = write("zerod.service", absl::StrReplaceAll(unit, {{"/usr/local/bin/", prefix + "/bin/"}}));
  const testing::CommandResult verify = testing::run_command("systemd-analyze verify " + here + " 2>&1");
  EXPECT_EQ(verify.code, 0) << verify.out;
  EXPECT_EQ(verify.out, "");
  // Exposure 2.0 of 10 as written; 2.5 leaves room for a new check, not
  // for a dropped restriction.
  const testing::CommandResult security =
      testing::run_command("systemd-analyze security --offline=yes --threshold=25 " + here + " 2>&1");
  EXPECT_EQ(security.code, 0) << security.out;

  // Its state directory is StateDirectory's, and the token is the
  // credential systemd loads.
  EXPECT_NE(unit.find("StateDirectory=zerod\n"), std::string::npos);
  EXPECT_EQ(testing::flag_value(argv, "--state-dir"), "/var/lib/zerod");
  EXPECT_NE(unit.find("LoadCredential=token:/etc/zerod/token\n"), std::string::npos);
  EXPECT_EQ(testing::flag_value(argv, "--token-file"), "${CREDENTIALS_DIRECTORY}/token");
  write("token", "unit-token\n");
  expect_serves(argv, {{"${CREDENTIALS_DIRECTORY}/token", path("token")}, {"/srv/zerod", dir_.string()}},
                prefix + "/bin/zerod", "unit-token");
}

TEST_F(DeployZerod, TheKubernetesDeploymentServes) {
  const std::vector<nlohmann::json> docs = testing::yaml_documents(source_path("deploy/kubernetes/zerod.yaml"));
  const nlohmann::json deployment = testing::document_of_kind(docs, "Deployment");
  ASSERT_FALSE(deployment.is_null());
  const nlohmann::json& pod = deployment["spec"]["template"]["spec"];
  const nlohmann::json& container = pod["containers"][0];
  const std::vector<std::string> argv = container["command"];
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "zerod");
  // The state on the claim, the token from the Secret's key.
  const std::string state = mount_path(container, "state");
  EXPECT_EQ(testing::flag_value(argv, "--state-dir"), state);
  EXPECT_EQ(volume(pod, "state")["persistentVolumeClaim"]["claimName"],
            testing::document_of_kind(docs, "PersistentVolumeClaim")["metadata"]["name"]);
  EXPECT_EQ(testing::flag_value(argv, "--token-file"), mount_path(container, "token") + "/token");
  EXPECT_EQ(volume(pod, "token")["secret"]["secretName"], "zerod-token");
  // The Service reaches the port zerod listens on.
  const std::string listen = testing::flag_value(argv, "--listen");
  const nlohmann::json service = testing::document_of_kind(docs, "Service");
  EXPECT_EQ(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"]);
  EXPECT_EQ(listen.substr(listen.rfind(':') + 1), std::to_string(container["ports"][0]["containerPort"].get<int>()));

  write("token", "pod-token");
  expect_serves(argv, {{mount_path(container, "token") + "/token", path("token")}, {state, path("state")}},
                ZEROD_DAEMON_BIN, "pod-token");
}

}  // namespace
}  // namespace zerod
