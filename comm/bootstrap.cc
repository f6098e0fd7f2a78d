#include "comm/bootstrap.h"

#include "absl/strings/str_cat.h"

#include "comm/routed_communicator.h"
#include "comm/staged_communicator.h"
#include "runtime/core/gpu_memory.h"

#ifdef ZEROD_WITH_MPI
#include "comm/mpi_communicator.h"
#endif
#ifdef ZEROD_WITH_NCCL
#include "comm/nccl_communicator.h"
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

absl::StatusOr<std::unique_ptr<Communicator>> make_device_communicator(std::unique_ptr<Communicator> host,
                                                                       const RankInfo& rank, Device& device,
                                                                       std::chrono::milliseconds timeout) {
  if (host->world_size() == 1 || device.host_visible()) return host;
  // NCCL refuses two ranks on one GPU, and open_device gives ranks past the
  // GPUs a shared one: then every rank stages, so the exchange is one kind.
  int64_t shared = !is_cuda_device(device) || rank.local_rank >= cuda_device_count();
  ZEROD_RETURN_IF_ERROR(all_reduce(*host, &shared, 1, CommType::kI64, ReduceOp::kMax));
#if defined(ZEROD_WITH_NCCL) && defined(ZEROD_WITH_MPI)
  if (!shared) {
    ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl, make_nccl_communicator_over_mpi(rank, timeout));
    nccl->set_compute_stream(device.compute_stream());
    // Host buffers go to MPI; a collective mixing the two is staged.
    return make_routed_communicator(std::move(nccl), make_staged_communicator(std::move(host), device), device);
  }
#else
  (void)timeout;
#endif
  return make_staged_communicator(std::move(host), device);
}

}  // namespace zerod
