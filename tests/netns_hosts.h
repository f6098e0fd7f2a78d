// Hosts on this machine for multi-host tests (scripts/netns_hosts.sh): each
// a network namespace on a bridge, with its own processes, /proc, hostname
// and memory cgroup, reached over ssh; ranks started on them by mpirun
// through scripts/netns_rsh.sh, so collectives cross a network as between
// machines, and a process on one host sees none of another. Needs root and
// openssh-server. For test_*.cc, which get ZEROD_SOURCE_DIR, ZEROD_MPIEXEC
// and ZEROD_WORKER_BIN from the build.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/process_tree.h"
#include "tests/worker_run.h"

namespace zerod::testing {

class NetnsHosts {
 public:
  // Brings up n hosts, named and addressed after this process (so runs of
  // the tests side by side do not meet); ok() says whether they came up.
  explicit NetnsHosts(int n)
      : n_(n), prefix_(absl::StrCat("zt", getpid() % 100000)), net_(absl::StrCat("10.231.", getpid() % 200 + 20)) {
    down();
    up_ = run_command(script("netns_hosts.sh", {"up", prefix_, std::to_string(n), net_}) + " 2>&1");
  }
  ~NetnsHosts() { down(); }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool ok() const { return up_.code == 0; }
  const std::string& error() const { return up_.out; }
  // Host i, from 1.
  std::string host(int i) const { return absl::StrCat(prefix_, i); }
  // This machine's address on the hosts' network, and host i's.
  std::string gateway() const { return net_ + ".1"; }
  std::string address(int i) const { return absl::StrCat(net_, ".", 10 + i); }
  // The command that runs a command on host i (in its namespaces): what
  // is run through it is a child of it, which ends as that command does.
  std::vector<std::string> enter(int i) const {
    return {"nsenter", "--target", std::to_string(init_pid(i)), "--net", "--pid", "--mount", "--uts", "--"};
  }
  // What mpirun is told to reach the hosts: the agent, and their network
  // for its own traffic and for the ranks'.
  std::vector<std::pair<std::string, std::string>> mca() const {
    const std::string net = net_ + ".0/24";
    return {{"plm_rsh_agent", std::string(ZEROD_SOURCE_DIR) + "/scripts/netns_rsh.sh"},
            {"oob_tcp_if_include", net},
            {"btl_tcp_if_include", net}};
  }

  // zero-worker's `args` as `np` ranks placed on `hosts` ("host:slots"),
  // started through the agent; stdout with stderr.
  CommandResult mpirun(const std::vector<std::string>& hosts, int np, const std::string& args) const {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    std::string cmd = absl::StrCat(ZEROD_MPIEXEC, " --host ", absl::StrJoin(hosts, ","), " -np ", np);
    for (const auto& [name, value] : mca()) absl::StrAppend(&cmd, " --mca ", name, " ", value);
    return run_command(absl::StrCat(cmd, " -x OMP_NUM_THREADS=1 ", ZEROD_WORKER_BIN, " ", args, " 2>&1"));
  }
  // The host whose network namespace process `pid` is in ("" for none).
  static std::string host_of(pid_t pid) {
    std::string out = run_command(absl::StrCat("ip netns identify ", pid, " 2>/dev/null")).out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }
  // Takes host i's link down: it is still there, but nothing reaches it;
  // and brings it up again.
  void cut(int i) const { run_command(script("netns_hosts.sh", {"cut", prefix_, std::to_string(i)}) + " 2>&1"); }
  void mend(int i) const { run_command(script("netns_hosts.sh", {"mend", prefix_, std::to_string(i)}) + " 2>&1"); }
  // Host i's processes may use this much memory together ("" when set).
  std::string limit_memory(int i, int64_t bytes) const {
    return run_command(script("netns_hosts.sh", {"limit", prefix_, std::to_string(i), std::to_string(bytes)}) +
                       " 2>&1")
        .out;
  }
  // The processes running on host i besides its sshd and `besides` (pids
  // as this machine numbers them), "pid command" a line: "" when none.
  std::string processes(int i, std::vector<pid_t> besides = {}) const {
    const pid_t sshd = init_pid(i);
    besides.insert(besides.end(), {sshd, parent_pid(sshd)});  // and the unshare that waits for it
    std::string out;
    const std::vector<std::string> lines = absl::StrSplit(run_command("ip netns pids " + host(i) + " 2>&1").out, '\n');
    for (const std::string& line : lines) {
      pid_t pid = 0;
      if (line.empty() ||
          (absl::SimpleAtoi(line, &pid) && std::find(besides.begin(), besides.end(), pid) != besides.end())) {
        continue;
      }
      absl::StrAppend(&out, line, " ", command_of(line), "\n");
    }
    return out;
  }

  // Bytes host i has sent and received over its link.
  uint64_t link_bytes(int i) const {
    return counter(host(i), "rx_bytes") + counter(host(i), "tx_bytes");
  }

 private:
  static std::string script(const std::string& name, const std::vector<std::string>& args) {
    return absl::StrCat("bash ", ZEROD_SOURCE_DIR, "/scripts/", name, " ", absl::StrJoin(args, " "));
  }
  pid_t init_pid(int i) const {
    std::ifstream f("/run/zerod-netns/host/" + host(i) + "/pid");
    pid_t pid = -1;
    f >> pid;
    return pid;
  }
  static std::string command_of(const std::string& pid) {
    std::ifstream f("/proc/" + pid + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    return cmd;
  }
  static uint64_t counter(const std::string& link, const std::string& name) {
    std::ifstream f("/sys/class/net/" + link + "/statistics/" + name);
    uint64_t v = 0;
    f >> v;
    return v;
  }
  void down() const { run_command(script("netns_hosts.sh", {"down", prefix_, std::to_string(n_)}) + " 2>&1"); }

  const int n_;
  const std::string prefix_, net_;
  CommandResult up_;
};

}  // namespace zerod::testing
