// Why an attempt failed, in words a user acts on: the rank and host, an exit
// status, a signal, the OOM killer, or a host gone silent.
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/coordinator/launcher.h"
#include "runtime/coordinator/supervisor.h"

namespace zerod {

std::optional<v1::Failure> Supervisor::lost_host_locked(const Attempt& a, Clock::time_point now) const {
  std::map<std::string, std::vector<int>> silent;  // by host: its ranks, while none of them is heard
  std::set<std::string> heard;
  for (const auto& [rank, r] : a.ranks) {
    if (r.host.empty()) continue;
    if (std::chrono::duration<double>(now - r.heard).count() <= options_.host_timeout_s) {
      heard.insert(r.host);
      silent.erase(r.host);
    } else if (!heard.count(r.host)) {
      silent[r.host].push_back(rank);
    }
  }
  if (silent.empty() || heard.empty()) return std::nullopt;
  const auto& [host, ranks] = *silent.begin();
  v1::Failure f;
  f.set_rank(-1);
  f.set_host(host);
  f.set_reason(absl::StrCat("host ", host, " stopped answering: no heartbeat from its ranks (",
                            absl::StrJoin(ranks, ", "), ") for over ", options_.host_timeout_s,
                            " s while the other hosts' came"));
  return f;
}

v1::Failure Supervisor::explain(const Attempt& a, std::optional<int> wait_status) const {
  v1::Failure f;
  f.set_rank(-1);
  std::string launcher_output;
  {
    std::ifstream in(log_path(a.job_id, -1), std::ios::binary);
    in.seekg(a.log_offset);
    launcher_output.assign(std::istreambuf_iterator<char>(in), {});
  }
  if (a.first_killed_rank >= 0) {
    // A kill a rank's agent saw is the cause: its peers may fail after
    // losing it, and mpirun may name one of them first.
    f.set_rank(a.first_killed_rank);
    f.set_signal(a.ranks.at(a.first_killed_rank).signal);
  } else if (auto r = parse_launcher_failure(launcher_output)) {
    f.set_rank(r->rank);
    f.set_exit_code(r->exit_code);
    f.set_signal(r->signal);
  } else if (a.first_failed_rank >= 0) {
    // mpirun's report can be missing (Open MPI loses it when several ranks
    // abort at once); the workers said it before aborting.
    f.set_rank(a.first_failed_rank);
    f.set_exit_code(*a.ranks.at(a.first_failed_rank).exit_code);
  } else if (wait_status) {
    if (WIFSIGNALED(*wait_status)) f.set_signal(WTERMSIG(*wait_status));
    if (WIFEXITED(*wait_status)) f.set_exit_code(WEXITSTATUS(*wait_status));
  }
  if (auto it = a.ranks.find(f.rank()); it != a.ranks.end()) {
    f.set_host(it->second.host);
    // Read from the rank's own host's cgroup by its agent.
    f.set_oom(f.signal() == SIGKILL && it->second.oom);
  } else if (f.rank() < 0 && f.signal() == SIGKILL && a.oom_base) {
    // mpirun, in zerod's cgroup.
    const std::optional<int64_t> kills = oom_kills();
    f.set_oom(kills && *kills > *a.oom_base);
  }
  const std::string who =
      f.rank() >= 0 ? absl::StrCat("rank ", f.rank(), f.host().empty() ? "" : " on ", f.host()) : std::string("mpirun");
  if (f.oom()) {
    f.set_reason(absl::StrCat(who, " was killed by the kernel's OOM killer"));
  } else if (f.signal() != 0) {
    f.set_reason(absl::StrCat(who, " was killed by ", signal_name(f.signal())));
  } else if (f.exit_code() != 0) {
    f.set_reason(absl::StrCat(who, " exited with status ", f.exit_code(),
                              f.exit_code() == 2   ? " (bad input)"
                              : f.exit_code() == 1 ? " (run failure)"
                                                   : ""));
  } else {
    f.set_reason("the attempt's processes ended while zerod was not running, and no exit was reported");
  }
  return f;
}

}  // namespace zerod
