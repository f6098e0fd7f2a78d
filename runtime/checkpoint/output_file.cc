#include "runtime/checkpoint/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

#include "runtime/core/crc32c.h"

namespace zerod {
absl::Status errno_error(const std::string& what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

absl::StatusOr<OutputFile> OutputFile::create(const std::string& path, const IoFaultHook* faults) {
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (faults && faults->on_open) {
    if (const int err = faults->on_open(path, flags); err != 0) {
      errno = err;
      return errno_error("cannot create", path);
    }
  }
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return errno_error("cannot create", path);
  return OutputFile(path, fd, faults);
}

OutputFile::OutputFile(OutputFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), faults_(o.faults_), offset_(o.offset_), crc_(o.crc_) {
  o.fd_ = -1;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status OutputFile::append(const void* data, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is already closed"));
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < n;) {
    // At its offset, so that what a short write left is written again there.
    ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset_));
    if (faults_ && faults_->on_complete) {
      w = faults_->on_complete(true, path_, offset_, static_cast<uint32_t>(n - done), w < 0 ? -errno : static_cast<int>(w));
      if (w < 0) errno = static_cast<int>(-w);
    }
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return errno_error(absl::StrCat("cannot write at offset ", offset_, " of"), path_);
    done += static_cast<size_t>(w);
    offset_ += static_cast<uint64_t>(w);
  }
  crc_ = crc32c(data, n, crc_);
  return absl::OkStatus();
}

absl::Status OutputFile::finish() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is already closed"));
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const absl::Status s = errno_error("cannot fsync", path_);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return errno_error("cannot close", path_);
  return absl::OkStatus();
}

absl::Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return errno_error("cannot fsync directory", dir);
  return absl::OkStatus();
}

}  // namespace zerod
