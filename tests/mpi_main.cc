// main() of the multi-rank test executables: the launcher's world (MPI when
// started by mpirun, a world of one otherwise), then GoogleTest on every
// rank; a failure on any rank fails them all.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "comm/bootstrap.h"
#include "tests/mpi_world.h"

namespace zerod::testing {
namespace {
std::unique_ptr<Communicator> g_world;
}  // namespace

Communicator& world() { return *g_world; }

}  // namespace zerod::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto rank = zerod::discover_rank();
  if (!rank.ok()) {
    std::fprintf(stderr, "%s\n", std::string(rank.status().message()).c_str());
    return 2;
  }
  auto comm = zerod::make_communicator(*rank, std::chrono::seconds(120));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 2;
  }
  zerod::testing::g_world = std::move(*comm);
  const int rc = RUN_ALL_TESTS();
  // Every rank agrees on the outcome before MPI goes away.
  int64_t failed = rc != 0;
  (void)zerod::all_reduce(*zerod::testing::g_world, &failed, 1, zerod::CommType::kI64, zerod::ReduceOp::kMax);
  zerod::testing::g_world.reset();
  return failed ? 1 : 0;
}
