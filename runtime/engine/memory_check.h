// zero-worker's start-up check: a rank's memory plan against the job's
// limits (run.host_memory_limit, else the node's memory; run.gpu_memory_limit) and the free space of
// its nvme_path directories, before anything is allocated. A job that cannot
// fit is bad input: its config asks for more than it allows.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"
#include "runtime/core/node_memory.h"

namespace zerod {

// What a job's memory comes from, for a message that says it does not fit.
std::string what_sets_the_size(const JobConfig& cfg);

// The host memory (pinned included) a rank may hold: run.host_memory_limit,
// else its share of `node`'s among the `local_ranks` on it; 0 where neither
// is known.
uint64_t host_memory_per_rank(const JobConfig& cfg, int local_ranks, const NodeMemory& node);

// `p`, rank `rank`'s planned peaks, against the limits (the host's from
// host_memory_per_rank, so a job that would exhaust the node's memory is
// refused too); the NVMe files of `local_ranks` such ranks (those on this
// node) against each nvme_path's free space. The refusal names the tier or
// path, the bytes, the shortfall and the categories that take them.
absl::Status check_memory_plan(const JobConfig& cfg, int rank, int local_ranks, const MemoryPeaks& p,
                               const NodeMemory& node);

// What `zeroctl estimate --fit` would change in `root` (the job's config,
// overrides applied) so that every rank of `world_size` fits the job's GPU
// limit and `host_memory` a rank (0: none), as a sentence for a refusal; ""
// when no limit is set or nothing fits.
std::string fit_advice(const nlohmann::json& root, const JobConfig& cfg, int world_size, bool gpu,
                       uint64_t host_memory);

}  // namespace zerod
