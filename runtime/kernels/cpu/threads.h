// How many threads the CPU kernels (OpenMP and OpenBLAS) use: the CPUs this
// process may run on (its affinity mask and its cgroup's CPU quota) shared
// among the ranks on its node, unless OMP_NUM_THREADS or run.threads says.
#pragma once

#include <optional>
#include <string>

namespace zerod {

struct ThreadChoice {
  int threads = 1;
  std::string why;  // "OMP_NUM_THREADS", "run.threads", or "4 CPUs / 2 ranks on this node"
};

// CPUs in the affinity mask, fewer where the cgroup's quota (cpu.max, or
// cfs_quota_us / cfs_period_us) allows less, rounded up; at least 1.
int usable_cpus();
// The quota in CPUs of a cgroup v2 cpu.max line ("max 100000" or
// "150000 100000"), rounded up; nullopt when unlimited or unreadable.
std::optional<int> cpus_of_quota(const std::string& cpu_max);

// `configured` is run.threads (0: choose); `local_ranks` the ranks on this
// node.
ThreadChoice choose_threads(int configured, int local_ranks);

// Sets OpenMP's and OpenBLAS's thread counts.
void use_threads(int threads);

// Unless the environment says how OpenMP's idle threads wait, runs this
// program again (same pid and arguments) with them spinning only briefly
// before they sleep, so that a busy machine slows a run in proportion to
// its load; OpenMP reads that only as the program starts. Returns when it
// cannot, or need not.
void reexec_with_short_spin_waits(char** argv);

}  // namespace zerod
