// The directory an offload tier keeps its files in (`nvme_path`), checked
// before anything is allocated: it exists, is a directory, takes new files,
// and has room for what will be put there.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/status.h"

namespace zerod {

// `key` names the setting in messages (e.g. "zero_optimization.offload_optimizer.nvme_path").
absl::Status check_swap_dir(const std::string& dir, uint64_t bytes_needed, const std::string& key);

// The path of this rank's file of one offload tier in `dir`; the pid keeps
// jobs that share a directory apart.
std::string swap_file_path(const std::string& dir, const std::string& what, int rank);

}  // namespace zerod
