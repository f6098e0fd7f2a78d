// A test seam for faults in zerod's file I/O: the offload tiers' io_uring
// transfers (offload/aio_engine.h) and the checkpoint files written durably
// (runtime/checkpoint/output_file.h) and committed (checkpoint_dir.h).
// Production code runs with no hook set.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace zerod {

// on_open returns an errno to fail the open of `path` with these flags (0
// lets it proceed); on_submit sees each transfer as the engine takes it, on
// the caller's thread; on_complete sees each write's or read's result from
// the kernel (a byte count, or a negative errno) and returns the result
// acted on.
struct IoFaultHook {
  std::function<int(const std::string& path, int flags)> on_open;
  std::function<void(bool write, const std::string& path, uint64_t offset, uint64_t bytes)> on_submit;
  std::function<int(bool write, const std::string& path, uint64_t offset, uint32_t len, int result)> on_complete;
  // Before each rename of a checkpoint commit (exchange: the atomic swap);
  // returns an errno to fail it with (EINVAL: as where the filesystem
  // cannot swap), 0 to let it run.
  std::function<int(const std::string& from, const std::string& to, bool exchange)> on_rename;
};

}  // namespace zerod
