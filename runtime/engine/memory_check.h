// zero-worker's start-up check: a rank's memory plan against the job's
// limits (run.host_memory_limit, run.gpu_memory_limit) and the free space of
// its nvme_path directories, before anything is allocated. A job that cannot
// fit is bad input: its config asks for more than it allows.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"

namespace zerod {

// What a job's memory comes from, for a message that says it does not fit.
std::string what_sets_the_size(const JobConfig& cfg);

// `p`, rank `rank`'s planned peaks, against the limits; the NVMe files of
// `local_ranks` such ranks (those on this node) against each nvme_path's
// free space. The refusal names the tier or path, the bytes, the shortfall
// and the categories that take them.
absl::Status check_memory_plan(const JobConfig& cfg, int rank, int local_ranks, const MemoryPeaks& p);

// What `zeroctl estimate --fit` would change in `root` (the job's config,
// overrides applied) so that every rank of `world_size` fits the job's own
// limits, as a sentence for a refusal; "" when no limit is set or nothing fits.
std::string fit_advice(const nlohmann::json& root, const JobConfig& cfg, int world_size, bool gpu);

}  // namespace zerod
