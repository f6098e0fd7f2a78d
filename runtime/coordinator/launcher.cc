#include "runtime/coordinator/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/core/whole_file.h"

extern char** environ;

namespace zerod {

std::string rank_log_path(const std::string& job_dir, int rank) {
  return absl::StrCat(job_dir, "/rank-", rank, ".log");
}

std::string exit_record_path(const std::string& job_dir, int rank) {
  return absl::StrCat(job_dir, "/rank-", rank, ".exit");
}

namespace {

// Children start with default signal handling and nothing blocked (zerod
// blocks signals in its threads; its children must not inherit that).
void init_spawn_attr(posix_spawnattr_t& attr, short flags) {
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, flags | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  const std::string self = name;
  return host == self || host == self.substr(0, self.find('.'));
}

// An agent asking one host to run `true`.
struct Probe {
  std::string host;
  pid_t pid = -1;
  int out = -1;  // its stdout and stderr, read as they come
  std::string said;
  std::optional<int> status;
};

void read_available(Probe& p) {
  char buf[4096];
  for (ssize_t n; (n = read(p.out, buf, sizeof buf)) > 0;) p.said.append(buf, n);
}

}  // namespace

absl::Status check_hosts_reachable(const std::vector<std::string>& hosts,
                                   const std::vector<std::pair<std::string, std::string>>& mca, double timeout_s) {
  std::vector<std::string> agent = {"ssh", "-o", "BatchMode=yes", "-o",
                                    absl::StrCat("ConnectTimeout=", std::max(1, static_cast<int>(timeout_s)))};
  for (const auto& [name, value] : mca) {
    if (name == "plm_rsh_agent") agent = absl::StrSplit(value, ' ', absl::SkipWhitespace());
  }
  std::vector<Probe> probes;
  absl::Status started;
  for (const std::string& entry : hosts) {
    const std::string host = entry.substr(0, entry.find(':'));
    if (is_this_machine(host) || agent.empty()) continue;
    Probe& p = probes.emplace_back();
    p.host = host;
    std::vector<std::string> args = agent;
    args.insert(args.end(), {host, "true"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      started = absl::InternalError(absl::StrCat("cannot make a pipe: ", std::strerror(errno)));
      probes.pop_back();
      break;
    }
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&files, fds[1], 1);
    posix_spawn_file_actions_adddup2(&files, fds[1], 2);
    posix_spawnattr_t attr;
    init_spawn_attr(attr, POSIX_SPAWN_SETSID);
    const int rc = posix_spawnp(&p.pid, argv[0], &files, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&files);
    close(fds[1]);
    p.out = fds[0];
    if (rc != 0) {
      p.pid = -1;
      started = absl::InvalidArgumentError(
          absl::StrCat("cannot start the agent '", agent[0], "' to reach the placement hosts: ", std::strerror(rc)));
      break;
    }
  }
  // Every probe runs at once; those still running at the deadline are killed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (bool waiting = true; waiting;) {
    waiting = false;
    for (Probe& p : probes) {
      if (p.pid < 0 || p.status) continue;
      read_available(p);
      int status = 0;
      if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
        p.status = status;
      } else if (std::chrono::steady_clock::now() >= deadline) {
        kill(-p.pid, SIGKILL);
        waitpid(p.pid, nullptr, 0);
        p.pid = -1;
      } else {
        waiting = true;
      }
    }
    if (waiting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  absl::Status first = started;
  for (Probe& p : probes) {
    read_available(p);
    close(p.out);
    if (!first.ok()) continue;
    std::string said(absl::StripAsciiWhitespace(p.said));
    if (const size_t nl = said.rfind('\n'); nl != std::string::npos) said = said.substr(nl + 1);
    if (!p.status) {
      first = absl::InvalidArgumentError(absl::StrCat("placement host '", p.host, "' did not answer '", agent[0],
                                                      "' within ", timeout_s, " s"));
    } else if (!WIFEXITED(*p.status) || WEXITSTATUS(*p.status) != 0) {
      first = absl::InvalidArgumentError(absl::StrCat("placement host '", p.host, "' cannot be reached through '",
                                                      agent[0], "'", said.empty() ? "" : ": ", said));
    }
  }
  return first;
}

std::vector<std::string> mpirun_argv(const LaunchSpec& spec) {
  std::vector<std::string> argv = {spec.mpirun, "-np", absl::StrCat(spec.world_size), "--wdir", spec.job_dir,
                                   // Ranks share this machine's cores with other jobs.
                                   "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (const auto& [name, value] : spec.mca) argv.insert(argv.end(), {"--mca", name, value});
  if (!spec.hosts.empty()) {
    argv.insert(argv.end(), {"--host", absl::StrJoin(spec.hosts, ",")});
  }
  argv.insert(argv.end(), {"-x", kWorkerTagEnv});
  for (const auto& [name, value] : spec.env) argv.insert(argv.end(), {"-x", absl::StrCat(name, "=", value)});
  for (const std::string& name : spec.exports) argv.insert(argv.end(), {"-x", name});
  if (!spec.agent.empty()) argv.push_back(spec.agent);
  argv.insert(argv.end(), {spec.worker, "--config", spec.config});
  for (const std::string& o : spec.overrides) argv.insert(argv.end(), {"--set", o});
  return argv;
}

absl::StatusOr<pid_t> launch(const LaunchSpec& spec) {
  const std::vector<std::string> args = mpirun_argv(spec);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // zerod's environment, with the tag set.
  const std::string tag = absl::StrCat(kWorkerTagEnv, "=", spec.tag);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, kWorkerTagEnv, std::strlen(kWorkerTagEnv)) != 0) envp.push_back(*e);
  }
  envp.push_back(const_cast<char*>(tag.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, spec.launcher_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  init_spawn_attr(attr, POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &files, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot start ", spec.mpirun, ": ", std::strerror(rc)));
  return pid;
}

std::vector<pid_t> tagged_processes(const std::string& tag) {
  std::string needle = absl::StrCat(kWorkerTagEnv, "=", tag);
  needle.push_back('\0');
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (!proc) return found;
  while (dirent* e = readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == getpid()) continue;
    std::optional<std::string> env = read_whole_file(absl::StrCat("/proc/", pid, "/environ"));
    if (!env) continue;
    env->insert(env->begin(), '\0');  // every entry is then "\0NAME=value\0"
    if (env->find(std::string(1, '\0') + needle) != std::string::npos) found.push_back(pid);
  }
  closedir(proc);
  return found;
}

int signal_attempt(pid_t launcher, const std::string& tag, int sig) {
  std::set<pid_t> groups;
  if (launcher > 0) groups.insert(launcher);  // a session leader: its group id is its pid
  for (pid_t p : tagged_processes(tag)) {
    const pid_t g = getpgid(p);
    if (g > 1 && g != getpgrp()) groups.insert(g);
  }
  int reached = 0;
  for (pid_t g : groups) reached += kill(-g, sig) == 0;
  return reached;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::optional<RankExit> parse_launcher_failure(const std::string& output) {
  static const std::regex signalled(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex exited(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+))");
  static const std::regex aborted(R"(MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (\d+))");
  std::smatch m;
  RankExit r;
  if (std::regex_search(output, m, signalled)) {
    r.rank = std::stoi(m[1]);
    r.signal = std::stoi(m[2]);
  } else if (std::regex_search(output, m, aborted) || std::regex_search(output, m, exited)) {
    r.rank = std::stoi(m[1]);
    r.exit_code = std::stoi(m[2]);
  } else {
    return std::nullopt;
  }
  return r;
}

std::optional<int64_t> parse_oom_kills(const std::string& memory_events) {
  const std::vector<std::string> lines = absl::StrSplit(memory_events, '\n');
  for (const std::string& line : lines) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    int64_t n = 0;
    if (f.size() == 2 && f[0] == "oom_kill" && absl::SimpleAtoi(f[1], &n)) return n;
  }
  return std::nullopt;
}

std::vector<std::string> oom_kill_files(const std::string& proc_self_cgroup) {
  std::vector<std::string> v1, v2;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::vector<std::string> controllers = absl::StrSplit(f[1], ',');
    const std::string dir = f[2] == "/" ? "" : f[2];
    // Without a cgroup namespace (a container on v1), the path is the
    // machine's, while the mount's root is the container's own cgroup.
    if (std::find(controllers.begin(), controllers.end(), "memory") != controllers.end()) {
      v1 = {absl::StrCat("/sys/fs/cgroup/memory", dir, "/memory.oom_control"),
            "/sys/fs/cgroup/memory/memory.oom_control"};
    } else if (f[0] == "0" && f[1].empty()) {
      v2 = {absl::StrCat("/sys/fs/cgroup", dir, "/memory.events"), "/sys/fs/cgroup/memory.events"};
    }
  }
  v1.insert(v1.end(), v2.begin(), v2.end());
  v1.erase(std::unique(v1.begin(), v1.end()), v1.end());
  return v1;
}

std::optional<int64_t> oom_kills() {
  const std::optional<std::string> cg = read_whole_file("/proc/self/cgroup");
  if (!cg) return std::nullopt;
  for (const std::string& file : oom_kill_files(*cg)) {
    if (std::optional<std::string> text = read_whole_file(file)) return parse_oom_kills(*text);
  }
  return std::nullopt;
}

std::vector<std::string> last_lines(const std::string& path, int n, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const int64_t size = in.tellg();
  const int64_t from = std::max<int64_t>(0, size - max_bytes);
  in.seekg(from);
  std::string text(size - from, '\0');
  in.read(text.data(), text.size());
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (from > 0 && !lines.empty()) lines.erase(lines.begin());  // cut mid-line
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin(), lines.end() - n);
  return lines;
}

}  // namespace zerod
