#include "runtime/core/whole_file.h"

#include <fstream>
#include <sstream>

namespace zerod {

std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace zerod
