// The communicator for this process's place in the job.
#pragma once

#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/rank_env.h"
#include "runtime/core/device.h"

namespace zerod {

// A world of one needs no MPI; a larger one uses MPI (Open MPI's mpirun or
// srun), and MPI's view of the world must agree with the launcher's
// variables. `timeout` bounds every collective wait.
absl::StatusOr<std::unique_ptr<Communicator>> make_communicator(const RankInfo& rank,
                                                                std::chrono::milliseconds timeout);

// The communicator the ranks train with on `device`, built on `host`
// (make_communicator's): `host` itself where the device's memory is host
// memory or the world is one rank; on GPUs, NCCL for GPU buffers (host
// buffers still over `host`) when every rank has a GPU of its own and the
// build has NCCL, else MPI through pinned staging. Every rank takes the same
// decision (a collective). `device` outlives the communicator.
absl::StatusOr<std::unique_ptr<Communicator>> make_device_communicator(std::unique_ptr<Communicator> host,
                                                                       const RankInfo& rank, Device& device,
                                                                       std::chrono::milliseconds timeout);

}  // namespace zerod
