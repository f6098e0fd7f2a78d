#include "runtime/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/checkpoint/output_file.h"
#include "runtime/core/crc32c.h"

namespace zerod {
namespace fs = std::filesystem;
namespace {

constexpr char kPrefix[] = "step-";
constexpr char kLatest[] = "latest";

// std::filesystem's codes are errno values here; the error keeps their kind.
absl::Status fs_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
  return absl::ErrnoToStatus(ec.value(), absl::StrCat(what, " ", path.string()));
}

// The step of a complete checkpoint's directory name, or -1.
int64_t step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() <= sizeof(kPrefix) - 1) return -1;
  int64_t step = 0;
  for (size_t i = sizeof(kPrefix) - 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

absl::Status require_writable_dir(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint dir ", root.string(), " is not a directory"));
  }
  if (::access(root.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint dir ", root.string(), " is not writable: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// rename(from, to), or the atomic swap of the two, through the fault hook.
int rename_through(const IoFaultHook* faults, const fs::path& from, const fs::path& to, bool exchange) {
  if (faults && faults->on_rename) {
    if (const int err = faults->on_rename(from.string(), to.string(), exchange); err != 0) {
      errno = err;
      return -1;
    }
  }
  return exchange ? ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE)
                  : ::rename(from.c_str(), to.c_str());
}

fs::path with_suffix(const fs::path& p, const char* suffix) { return p.string() + suffix; }

// Puts tmp at final's place. An existing final (the same step saved again)
// is swapped out atomically where the filesystem allows; elsewhere the new
// checkpoint waits whole as final.new (which latest_checkpoint() takes
// while final is missing) until the old one is moved aside. The old one is
// then removed.
absl::Status publish(const fs::path& root, const fs::path& tmp, const fs::path& final_dir, const IoFaultHook* faults) {
  std::error_code ec;
  const fs::path fresh = with_suffix(final_dir, ".new"), old = with_suffix(final_dir, ".old");
  // What a cut commit of this step left: final.old is never read; final.new
  // stands for a missing final, so it takes final's name before it goes.
  fs::remove_all(old, ec);
  if (ec) return fs_error("cannot remove", old, ec);
  if (!fs::exists(final_dir, ec) && fs::is_directory(fresh, ec)) {
    if (rename_through(faults, fresh, final_dir, false) != 0)
      return errno_error("cannot rename to", final_dir.string());
    ZEROD_RETURN_IF_ERROR(fsync_dir(root.string()));
  }
  fs::remove_all(fresh, ec);
  if (ec) return fs_error("cannot remove", fresh, ec);
  if (!fs::exists(final_dir, ec)) {
    if (rename_through(faults, tmp, final_dir, false) != 0) return errno_error("cannot publish", final_dir.string());
    return absl::OkStatus();
  }
  if (rename_through(faults, tmp, final_dir, true) == 0) {
    fs::remove_all(tmp, ec);  // now the old checkpoint
    if (ec) return fs_error("cannot remove replaced checkpoint", tmp, ec);
    return absl::OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS) return errno_error("cannot replace", final_dir.string());
  for (const auto& [from, to] : {std::pair{tmp, fresh}, std::pair{final_dir, old}, std::pair{fresh, final_dir}}) {
    if (rename_through(faults, from, to, false) != 0) return errno_error("cannot rename to", to.string());
    ZEROD_RETURN_IF_ERROR(fsync_dir(root.string()));
  }
  fs::remove_all(old, ec);
  if (ec) return fs_error("cannot remove replaced checkpoint", old, ec);
  return absl::OkStatus();
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) { return absl::StrFormat("%s%08d", kPrefix, step); }

absl::StatusOr<std::string> begin_checkpoint(const std::string& root_s, int64_t step) {
  const fs::path root(root_s);
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    fs::create_directories(root, ec);
    if (ec) return fs_error("cannot create checkpoint dir", root, ec);
  }
  ZEROD_RETURN_IF_ERROR(require_writable_dir(root));
  const fs::path tmp = root / (checkpoint_dir_name(step) + ".tmp");
  fs::remove_all(tmp, ec);
  if (ec) return fs_error("cannot clear", tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return fs_error("cannot create", tmp, ec);
  return tmp.string();
}

absl::Status check_checkpoint_root(const std::string& root_s) {
  fs::path at = fs::absolute(fs::path(root_s));
  std::error_code ec;
  // Up to the first path that exists: begin_checkpoint creates the rest.
  while (!fs::exists(fs::symlink_status(at, ec)) && at.has_parent_path() && at != at.parent_path()) {
    at = at.parent_path();
  }
  if (absl::Status s = require_writable_dir(at); !s.ok()) {
    if (at == fs::absolute(fs::path(root_s))) return s;
    return absl::InvalidArgumentError(absl::StrCat("checkpoint dir ", root_s, " cannot be created: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> write_file_durably(const std::string& path, const void* data, size_t n,
                                           const IoFaultHook* faults) {
  ZEROD_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(path, faults));
  ZEROD_RETURN_IF_ERROR(f.append(data, n));
  ZEROD_RETURN_IF_ERROR(f.finish());
  return f.crc();
}

absl::Status replace_file_durably(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  ZEROD_RETURN_IF_ERROR(write_file_durably(tmp, text.data(), text.size()).status());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat("cannot rename ", tmp, " to ", path));
  return absl::OkStatus();
}

absl::Status commit_checkpoint(const std::string& root_s, int64_t step, const IoFaultHook* faults) {
  const fs::path root(root_s);
  const std::string name = checkpoint_dir_name(step);
  const fs::path tmp = root / (name + ".tmp");
  std::error_code ec;
  if (!fs::is_directory(tmp, ec)) return absl::FailedPreconditionError(absl::StrCat("no checkpoint being written at ", tmp.string()));
  ZEROD_RETURN_IF_ERROR(fsync_dir(tmp.string()));
  ZEROD_RETURN_IF_ERROR(publish(root, tmp, root / name, faults));
  ZEROD_RETURN_IF_ERROR(fsync_dir(root.string()));

  const std::string line = name + "\n";
  const std::string latest_tmp = (root / (std::string(kLatest) + ".tmp")).string();
  ZEROD_RETURN_IF_ERROR(write_file_durably(latest_tmp, line.data(), line.size()).status());
  if (rename_through(faults, latest_tmp, root / kLatest, false) != 0) {
    return errno_error("cannot update", (root / kLatest).string());
  }
  return fsync_dir(root.string());
}

absl::Status prune_checkpoints(const std::string& root_s, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("checkpoint keep must be >= 1, got ", keep));
  ZEROD_ASSIGN_OR_RETURN(std::vector<int64_t> steps, list_checkpoints(root_s));
  const absl::StatusOr<std::string> latest = latest_checkpoint(root_s);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    const fs::path old = fs::path(root_s) / checkpoint_dir_name(steps[i]);
    if (latest.ok() && old.string() == *latest) continue;
    std::error_code ec;
    fs::remove_all(old, ec);
    if (ec) return fs_error("cannot remove old checkpoint", old, ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> latest_checkpoint(const std::string& root_s) {
  const fs::path root(root_s);
  std::ifstream in(root / kLatest);
  if (!in) return absl::NotFoundError(absl::StrCat("no checkpoint in ", root.string(), " (no 'latest' file)"));
  std::string name;
  std::getline(in, name);
  if (step_of(name) < 0) {
    return absl::DataLossError(absl::StrCat((root / kLatest).string(), " names '", name, "', not a checkpoint"));
  }
  std::error_code ec;
  if (fs::is_directory(root / name, ec)) return (root / name).string();
  // A commit without RENAME_EXCHANGE cut while the old one was moved aside.
  if (const fs::path fresh = with_suffix(root / name, ".new"); fs::is_directory(fresh, ec)) return fresh.string();
  return absl::DataLossError(absl::StrCat((root / kLatest).string(), " names ", name, ", which is missing"));
}

absl::StatusOr<std::vector<int64_t>> list_checkpoints(const std::string& root_s) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(root_s, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = step_of(it->path().filename().string());
    if (s >= 0 && it->is_directory()) steps.push_back(s);
  }
  if (ec) return fs_error("cannot list", fs::path(root_s), ec);
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace zerod
