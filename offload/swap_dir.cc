#include "offload/swap_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerod {
namespace {

absl::Status check_swap_dir(const std::string& dir, uint64_t bytes_needed, const std::string& key) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(key, ": '", dir, "' does not exist (", std::strerror(errno), ")"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": '", dir, "' is not a directory"));
  }
  // Permission bits do not tell (root, read-only mounts): try a file.
  const std::string probe = absl::StrCat(dir, "/.zerod-probe-", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(key, ": cannot create files in '", dir, "' (", std::strerror(errno), ")"));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(key, ": cannot read the free space of '", dir, "'"));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < bytes_needed) {
    return absl::FailedPreconditionError(absl::StrCat(key, ": '", dir, "' has ", free_bytes,
                                                      " bytes free, but the offloaded files need ", bytes_needed, ", ",
                                                      bytes_needed - free_bytes, " more"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status check_swap_dirs(const std::vector<SwapFile>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    bool seen = false;
    uint64_t bytes = 0;
    for (size_t j = 0; j < files.size(); ++j) {
      if (files[j].dir != files[i].dir) continue;
      seen |= j < i;
      bytes += files[j].bytes;
    }
    if (!seen) ZEROD_RETURN_IF_ERROR(check_swap_dir(files[i].dir, bytes, files[i].key));
  }
  return absl::OkStatus();
}

std::string swap_file_path(const std::string& dir, const std::string& what, int rank) {
  return absl::StrFormat("%s/zerod-%s-rank%05d-pid%d.swap", dir, what, rank, ::getpid());
}

}  // namespace zerod
