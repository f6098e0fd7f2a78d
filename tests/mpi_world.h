// The communicator of a multi-rank test executable (mpi_test_*.cc), which
// mpirun starts as several ranks; mpi_main.cc sets it up before the tests.
#pragma once

#include "comm/communicator.h"

namespace zerod::testing {

Communicator& world();

}  // namespace zerod::testing
