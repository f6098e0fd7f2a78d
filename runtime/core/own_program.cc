#include "runtime/core/own_program.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"

namespace zerod {

std::optional<std::string> own_program() {
  std::error_code ec;
  const std::string path = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || path.empty() || absl::EndsWith(path, " (deleted)")) return std::nullopt;
  return path;
}

std::string program_beside(const std::string& name) {
  const std::optional<std::string> self = own_program();
  return self ? (std::filesystem::path(*self).parent_path() / name).string() : name;
}

}  // namespace zerod
