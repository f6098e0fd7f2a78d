// The on-disk protocol that makes checkpoints atomic. Under a root directory:
//
//   step-00001200/      a complete checkpoint: its manifest was written last
//   step-00001300.tmp/  one being written; a crash leaves it behind, and the
//                       next save of that step starts it afresh
//   latest              the name of the newest complete checkpoint, replaced
//                       by rename, so it always names a whole one
//
// A save: begin_checkpoint() makes the .tmp directory, every rank writes its
// files into it with write_file_durably() (each fsynced), then one rank
// writes the manifest the same way and calls commit_checkpoint(): rename to
// the final name, fsync the root and point `latest` at it. Then
// prune_checkpoints() deletes the oldest complete checkpoints beyond `keep`.
// A crash at any point leaves the previous checkpoint intact and `latest`
// naming a complete one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/io_faults.h"
#include "runtime/core/status.h"

namespace zerod {

std::string checkpoint_dir_name(int64_t step);  // "step-00001200"

// Creates root (and its parents) if needed and an empty <root>/step-N.tmp,
// replacing a stale one; returns its path. Refuses a root that is not a
// writable directory.
absl::StatusOr<std::string> begin_checkpoint(const std::string& root, int64_t step);

// Whether begin_checkpoint could make and write root, checked before a run
// starts without changing anything: root a writable directory, or its
// nearest existing ancestor one where root does not exist yet.
absl::Status check_checkpoint_root(const std::string& root);

// Writes data[0, n) to path (created or truncated), fsyncs and closes it.
// Returns the CRC-32C of the bytes. `faults`: tests only.
absl::StatusOr<uint32_t> write_file_durably(const std::string& path, const void* data, size_t n,
                                           const IoFaultHook* faults = nullptr);

// Writes `text` to path.tmp, fsynced, and renames it to path: the file
// appears whole or not at all.
absl::Status replace_file_durably(const std::string& path, const std::string& text);

// Publishes <root>/step-N.tmp as <root>/step-N and makes it the latest.
// A step-N already there (the step saved again) is swapped out atomically;
// where the filesystem cannot swap (no RENAME_EXCHANGE), the new one is
// first renamed to step-N.new, whole, and latest_checkpoint() takes that
// while step-N is moved aside, so `latest` never lacks a whole checkpoint.
absl::Status commit_checkpoint(const std::string& root, int64_t step, const IoFaultHook* faults = nullptr);

// Removes the complete checkpoints but the newest `keep` (keep >= 1) and the
// one `latest` names.
absl::Status prune_checkpoints(const std::string& root, int keep);

// The path of the checkpoint `latest` names (its .new where a commit was
// cut between its renames); NotFound when there is none.
absl::StatusOr<std::string> latest_checkpoint(const std::string& root);

// Steps of the complete checkpoints under root, ascending.
absl::StatusOr<std::vector<int64_t>> list_checkpoints(const std::string& root);

}  // namespace zerod
