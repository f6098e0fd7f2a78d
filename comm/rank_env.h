// This process's place in a job, from the launcher's environment: mpirun
// (OMPI_COMM_WORLD_*), srun (SLURM_*) or torchrun-style (RANK/WORLD_SIZE/...).
#pragma once

#include "runtime/core/status.h"

namespace zerod {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;  // ranks on this node (the world where the launcher does not say)
};

// A world of one when no launcher variables are set; an error names a
// variable that is set but malformed or inconsistent.
absl::StatusOr<RankInfo> discover_rank();

}  // namespace zerod
