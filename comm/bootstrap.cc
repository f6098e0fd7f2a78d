#include "comm/bootstrap.h"

#include "absl/strings/str_cat.h"

#ifdef ZEROD_WITH_MPI
#include "comm/mpi_communicator.h"
#endif

namespace zerod {

absl::StatusOr<std::unique_ptr<Communicator>> make_communicator(const RankInfo& rank,
                                                                std::chrono::milliseconds timeout) {
  if (rank.world_size == 1) return make_local_communicator();
#ifdef ZEROD_WITH_MPI
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, make_mpi_communicator(timeout));
  if (comm->world_size() != rank.world_size || comm->rank() != rank.rank) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the launcher says rank ", rank.rank, " of ", rank.world_size, " but MPI sees rank ", comm->rank(), " of ",
        comm->world_size(), ": start multi-rank jobs with mpirun or srun"));
  }
  return comm;
#else
  (void)timeout;
  return absl::FailedPreconditionError(absl::StrCat("launched as rank ", rank.rank, " of ", rank.world_size,
                                                    ", but this build has no MPI (ZEROD_WITH_MPI=OFF): several ranks under mpirun or srun need a build with MPI"));
#endif
}

}  // namespace zerod
