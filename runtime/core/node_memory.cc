#include "runtime/core/node_memory.h"

#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

// The limit a cgroup file gives, 0 where it gives none ("max", unreadable,
// or a v1 limit of "no limit": past any machine's memory).
uint64_t limit_in(const std::string& path) {
  uint64_t bytes = 0;
  const std::optional<std::string> text = read_whole_file(path);
  if (!text || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &bytes)) return 0;
  return bytes;
}

}  // namespace

NodeMemory node_memory(uint64_t physical, const std::string& self_cgroup, const std::string& cgroup_root) {
  NodeMemory m{physical, "physical memory"};
  // Each hierarchy holding the memory controller: v2's ("0::/path", the
  // file memory.max) and v1's ("N:...memory...:/path", in its own mount).
  for (absl::string_view line : absl::StrSplit(self_cgroup, '\n')) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3 || f[2].empty() || f[2][0] != '/') continue;
    std::string dir, file;
    if (f[0] == "0" && f[1].empty()) {
      dir = cgroup_root;
      file = "memory.max";
    } else if (absl::c_linear_search(absl::StrSplit(f[1], ','), "memory")) {
      dir = absl::StrCat(cgroup_root, "/memory");
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    // The cgroup and each above it, to the hierarchy's root.
    std::string path(f[2]);
    for (;;) {
      const std::string at = absl::StrCat(dir, path == "/" ? "" : path, "/", file);
      const uint64_t limit = limit_in(at);
      if (limit > 0 && (m.bytes == 0 || limit < m.bytes)) m = {limit, absl::StrCat("the limit of cgroup ", path)};
      if (path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return m;
}

NodeMemory node_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t physical = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  return node_memory(physical, read_whole_file("/proc/self/cgroup").value_or(""), "/sys/fs/cgroup");
}

}  // namespace zerod
