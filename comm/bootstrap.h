// The communicator for this process's place in the job.
#pragma once

#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/rank_env.h"

namespace zerod {

// A world of one needs no MPI; a larger one uses MPI (Open MPI's mpirun or
// srun), and MPI's view of the world must agree with the launcher's
// variables. `timeout` bounds every collective wait.
absl::StatusOr<std::unique_ptr<Communicator>> make_communicator(const RankInfo& rank,
                                                                std::chrono::milliseconds timeout);

}  // namespace zerod
