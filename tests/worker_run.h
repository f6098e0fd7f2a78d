// Running zero-worker from a test: in-process through run_worker, the real
// binary under mpirun, and the JSON events of its output. For test_*.cc,
// which get ZEROD_WORKER_BIN and ZEROD_MPIEXEC from the build.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/engine/worker.h"

namespace zerod::testing {

// zero-worker's exit status and output, called in-process with these
// arguments and the trainer's surroundings `env` (faults).
struct WorkerResult {
  int code;
  std::string out, err;
};
inline WorkerResult run_worker_with(std::vector<std::string> args, TrainerEnv env = {}) {
  args.insert(args.begin(), "zero-worker");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int code = run_worker(static_cast<int>(argv.size()), argv.data(), out, err, nullptr, std::move(env));
  return {code, out.str(), err.str()};
}

// The JSON lines of a run's output, in order.
inline std::vector<nlohmann::json> events(const std::string& out) {
  std::vector<nlohmann::json> e;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty() && l[0] == '{') e.push_back(nlohmann::json::parse(l));
  }
  return e;
}

// The events of one kind, in order.
inline std::vector<nlohmann::json> of_kind(const std::vector<nlohmann::json>& all, const std::string& kind) {
  std::vector<nlohmann::json> e;
  for (const nlohmann::json& j : all) {
    if (j["event"] == kind) e.push_back(j);
  }
  return e;
}

// Each step's loss in a run's JSON events, in order.
inline std::vector<double> step_losses(const std::string& out) {
  std::vector<double> l;
  for (const nlohmann::json& e : of_kind(events(out), "step")) l.push_back(e["loss"]);
  return l;
}

// A shell command's exit status and its stdout.
struct CommandResult {
  int code;
  std::string out;
};
inline CommandResult run_command(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int s = pclose(p);
  return {WIFEXITED(s) ? WEXITSTATUS(s) : -1, out};
}

#ifdef ZEROD_WITH_MPI
// The binary as np ranks under mpirun: exit status, and stdout with stderr.
inline CommandResult mpirun(int np, const std::string& args) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return run_command(absl::StrCat(ZEROD_MPIEXEC, " -np ", np, " --oversubscribe -x OMP_NUM_THREADS=1 ",
                                  ZEROD_WORKER_BIN, " ", args, " 2>&1"));
}
#endif  // ZEROD_WITH_MPI

}  // namespace zerod::testing
