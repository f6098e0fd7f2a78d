#include "runtime/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/own_program.h"

namespace zerod {
namespace {

// Iterations an idle OpenMP thread spins before it sleeps (libgomp's
// default is 300000, some milliseconds). Sleeping this soon costs a run
// alone on its cores about 8% and spares a shared machine most of the
// spinning: beside one busy loop per core a run is 1.9x slower, not 18x
// (bench/RESULTS.md, bench/cpu_sharing.sh).
constexpr char kSpinCount[] = "1000";

}  // namespace

std::optional<int> cpus_of_quota(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota, period;
  int64_t q = 0, p = 0;
  if (!(in >> quota >> period) || !absl::SimpleAtoi(quota, &q) || !absl::SimpleAtoi(period, &p) || q <= 0 || p <= 0) {
    return std::nullopt;  // "max", or not a quota
  }
  return static_cast<int>(std::max<int64_t>(1, (q + p - 1) / p));
}

int usable_cpus() {
  int cpus = 1;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  // cgroup v2, then v1.
  std::string line;
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); std::getline(v2, line)) {
    if (std::optional<int> q = cpus_of_quota(line)) cpus = std::min(cpus, *q);
  } else {
    std::string quota, period;
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (std::getline(q, quota) && std::getline(p, period)) {
      if (std::optional<int> c = cpus_of_quota(quota + " " + period)) cpus = std::min(cpus, *c);
    }
  }
  return cpus;
}

ThreadChoice choose_threads(int configured, int local_ranks) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && *env) {
    int n = 0;
    // OpenMP reads a list ("4,2"); its first level is what the kernels use.
    const absl::string_view list(env);
    if (absl::SimpleAtoi(list.substr(0, list.find(',')), &n) && n > 0) {
      return {n, "OMP_NUM_THREADS"};
    }
  }
  if (configured > 0) return {configured, "run.threads"};
  const int cpus = usable_cpus(), ranks = std::max(1, local_ranks);
  return {std::max(1, cpus / ranks), absl::StrCat(cpus, cpus == 1 ? " CPU / " : " CPUs / ", ranks,
                                                  ranks == 1 ? " rank" : " ranks", " on this node")};
}

void use_threads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

void reexec_with_short_spin_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  // The binary's own path, not /proc/self/exe, so the process keeps its
  // name (ps, and whatever finds workers by it).
  const std::optional<std::string> self = own_program();
  if (!self) return;
  setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  execv(self->c_str(), argv);
  unsetenv("GOMP_SPINCOUNT");  // exec failed: carry on as started
}

}  // namespace zerod
