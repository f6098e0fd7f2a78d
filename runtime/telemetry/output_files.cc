#include "runtime/telemetry/output_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace zerod {

absl::Status create_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the directory '", dir, "'", ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  return absl::OkStatus();
}

absl::Status file_error(const std::string& what, const std::string& path) {
  return absl::PermissionDeniedError(absl::StrCat(what, " '", path, "': ", std::strerror(errno)));
}

}  // namespace zerod
