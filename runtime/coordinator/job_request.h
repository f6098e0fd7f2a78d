// A submitted job, checked before anything is recorded or launched: the
// request's own fields, the config exactly as zero-worker would check it, and
// every path in it confined to where this zerod lets jobs read and write.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/zerod.pb.h"
#include "runtime/core/status.h"

namespace zerod {

struct JobRules {
  int slots = 1;                          // ranks this zerod runs at once
  std::vector<std::string> allowed_roots;  // absolute, canonical; where absolute paths may point
};

// The config the job's workers run, or InvalidArgument naming what is wrong.
// Relative paths stay relative: the workers run in the job's directory, so
// they land there (a relative path may not climb out with ".."). Absolute
// paths must resolve, symbolic links followed, under an allowed root.
// Checkpoints default to "checkpoints", and run.resume to "latest", so that
// a relaunched attempt continues from the newest checkpoint.
absl::StatusOr<nlohmann::json> prepare_job(const v1::SubmitJobRequest& request, const JobRules& rules);

// A job config's size limit, for zeroctl and the service alike.
inline constexpr size_t kMaxConfigBytes = size_t{1} << 20;

// A placement entry: 'host' or 'host:slots', the host a name or address
// that starts with a letter or digit (so that ssh or mpirun cannot take it
// for an option), slots at least 1. Its slots (1 when not given, as mpirun
// counts them), or InvalidArgument naming the entry.
absl::StatusOr<int> check_host(const std::string& entry);

// The job's checkpoint root, relative to its directory when the config says so.
std::string checkpoint_root(const nlohmann::json& config);

}  // namespace zerod
