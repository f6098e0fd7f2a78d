// Collectives over Open MPI on host buffers, run on a comm thread.
#pragma once

#include <chrono>
#include <memory>

#include "comm/communicator.h"

namespace zerod {

// Initialises MPI (thread-multiple) if nobody has; the communicator spans
// MPI_COMM_WORLD. A collective still incomplete after `timeout` fails with
// a message naming it and the ranks that have not reached it.
absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(std::chrono::milliseconds timeout);

// An MPI return code as a Status naming `what` and MPI's own message.
absl::Status mpi_status(int rc, const char* what);

}  // namespace zerod
