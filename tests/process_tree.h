// Parents and children of processes, from /proc (/proc/PID/task/*/children
// is not in every kernel).
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zerod::testing {

// -1 when it is gone.
inline pid_t parent_pid(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  const std::string stat((std::istreambuf_iterator<char>(f)), {});
  // "pid (comm) state ppid ...", where comm may hold anything but ends at the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return -1;
  const std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  pid_t ppid = -1;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid)) return -1;
  return ppid;
}

// A child of `pid` (the first found), -1 when it has none.
inline pid_t child_pid(pid_t pid) {
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    pid_t p = 0;
    if (absl::SimpleAtoi(e->d_name, &p) && parent_pid(p) == pid) {
      found = p;
      break;
    }
  }
  closedir(proc);
  return found;
}

}  // namespace zerod::testing
