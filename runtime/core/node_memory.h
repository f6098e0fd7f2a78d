// The memory this process's machine gives it: what a job's host memory
// plan is checked against where run.host_memory_limit does not say.
#pragma once

#include <cstdint>
#include <string>

namespace zerod {

struct NodeMemory {
  uint64_t bytes = 0;  // 0: not known
  std::string what;    // "physical memory", or the cgroup whose limit it is
};

// Physical memory, or less where this process's memory cgroup, or one
// above it, is limited (cgroup v2's memory.max, v1's
// memory.limit_in_bytes): more than that and the kernel ends the process.
NodeMemory node_memory();

// The same from `physical` bytes, the text of /proc/self/cgroup and the
// cgroup file system mounted at `cgroup_root` (a test's own directory).
NodeMemory node_memory(uint64_t physical, const std::string& self_cgroup, const std::string& cgroup_root);

}  // namespace zerod
