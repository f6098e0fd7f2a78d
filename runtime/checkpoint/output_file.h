// A file written front to back and made durable: every error names the path
// and the offset, and finish() returns only once the bytes are on disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/io_faults.h"
#include "runtime/core/status.h"

namespace zerod {

class OutputFile {
 public:
  // Creates or truncates path. `faults` (tests only; it must outlive the
  // file) sees the open and each write.
  static absl::StatusOr<OutputFile> create(const std::string& path, const IoFaultHook* faults = nullptr);
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&&) = delete;
  ~OutputFile();  // closes without fsync if finish() was not reached

  absl::Status append(const void* data, size_t n);
  // fsync and close.
  absl::Status finish();
  uint64_t size() const { return offset_; }
  uint32_t crc() const { return crc_; }  // CRC-32C of the bytes appended

 private:
  OutputFile(std::string path, int fd, const IoFaultHook* faults)
      : path_(std::move(path)), fd_(fd), faults_(faults) {}

  std::string path_;
  int fd_;
  const IoFaultHook* faults_;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

// "<what> <path>: <errno's text>", of errno's kind (exit_codes.h).
absl::Status errno_error(const std::string& what, const std::string& path);

// Makes a rename or a new entry in `dir` durable.
absl::Status fsync_dir(const std::string& dir);

}  // namespace zerod
