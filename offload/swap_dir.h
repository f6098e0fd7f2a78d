// The directory an offload tier keeps its files in (`nvme_path`), checked
// before anything is allocated: it exists, is a directory, takes new files,
// and has room for what will be put there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

// A file an offload tier will create: its directory, its size, and the
// setting that names the directory in messages (e.g.
// "zero_optimization.offload_optimizer.nvme_path").
struct SwapFile {
  std::string dir;
  uint64_t bytes;
  std::string key;
};
// Checks each directory once, for the room of all the files it will hold.
absl::Status check_swap_dirs(const std::vector<SwapFile>& files);

// The path of this rank's file of one offload tier in `dir`; the pid keeps
// jobs that share a directory apart.
std::string swap_file_path(const std::string& dir, const std::string& what, int rank);

}  // namespace zerod
