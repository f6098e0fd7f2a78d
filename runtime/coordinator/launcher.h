// Starting a job's ranks through mpirun, finding every process of an attempt
// again (also after zerod restarts), stopping them, and reading why an
// attempt failed from what mpirun and the kernel say.
//
// Every process of an attempt carries ZEROD_WORKER_TAG=<tag> in its
// environment: mpirun gets it and exports it to each rank. Open MPI puts each
// rank (its agent and training, worker_agent.h) in a process group of its
// own, so stopping an attempt signals the groups of mpirun and of every
// tagged process that zerod can see: those of its own host. Ranks on other
// hosts are stopped by mpirun and by their agents, whatever zerod sees.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

inline constexpr char kWorkerTagEnv[] = "ZEROD_WORKER_TAG";

struct LaunchSpec {
  std::string mpirun = "mpirun";
  std::string worker;                       // zero-worker
  std::string agent;                        // zero-agent, which runs it (none: mpirun runs it)
  int world_size = 1;
  std::vector<std::string> hosts;           // "host" or "host:slots"; none: this machine
  // mpirun --mca settings: how it reaches other hosts (plm_rsh_agent), the
  // networks it uses (oob_tcp_if_include, btl_tcp_if_include), ...
  std::vector<std::pair<std::string, std::string>> mca;
  std::string job_dir;                      // the ranks' working directory
  std::string config;                       // the job config the ranks read
  std::vector<std::string> overrides;       // zero-worker --set
  std::vector<std::pair<std::string, std::string>> env;  // exported to every rank
  // Variables of mpirun's own environment exported to every rank (ranks on
  // other hosts get no others).
  std::vector<std::string> exports;
  std::string tag;
  std::string launcher_log;                 // mpirun's own output, appended
};

// What each rank leaves in its job directory: its output, appended across
// attempts, and its exit report (a serialized v1.ReportExitRequest).
std::string rank_log_path(const std::string& job_dir, int rank);
std::string exit_record_path(const std::string& job_dir, int rank);

// The command, an argv array (never a shell string).
std::vector<std::string> mpirun_argv(const LaunchSpec& spec);

// Starts mpirun in a new session (its own process group), a child of this process.
absl::StatusOr<pid_t> launch(const LaunchSpec& spec);

// Asks each placement host ("host" or "host:slots") to run `true` through
// the agent mpirun would reach it with (`mca`'s plm_rsh_agent, else ssh
// without a password prompt), all at once, each within timeout_s. Hosts
// that name this machine are not asked. InvalidArgument naming the first
// host that did not answer, with the agent's last words.
absl::Status check_hosts_reachable(const std::vector<std::string>& hosts,
                                   const std::vector<std::pair<std::string, std::string>>& mca, double timeout_s);

// Processes whose environment carries the tag (those this user may read).
std::vector<pid_t> tagged_processes(const std::string& tag);

// Sends `sig` to the process group of `launcher` (when > 0) and of every
// tagged process; how many groups it reached.
int signal_attempt(pid_t launcher, const std::string& tag, int sig);

// "SIGKILL", or "signal N" for one without a name.
std::string signal_name(int sig);

// The first failed rank, as mpirun reports it in its output.
struct RankExit {
  int rank = -1;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when it was killed
};
std::optional<RankExit> parse_launcher_failure(const std::string& output);

// Processes the kernel's OOM killer has ended in this process's memory
// cgroup (v1 memory.oom_control, else v2 memory.events); nullopt where the
// kernel does not say.
std::optional<int64_t> oom_kills();
// Where it looks, first found first, given /proc/self/cgroup's text: the
// cgroup's own file, then that of the mount's root (which is the
// process's cgroup in a container without a cgroup namespace).
std::vector<std::string> oom_kill_files(const std::string& proc_self_cgroup);
// The same, from either file's text.
std::optional<int64_t> parse_oom_kills(const std::string& memory_events);

// The last `n` lines of a file (a rank's log), at most `max_bytes` read.
std::vector<std::string> last_lines(const std::string& path, int n, int64_t max_bytes = 64 << 10);

}  // namespace zerod
