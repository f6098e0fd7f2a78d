#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#ifdef ZEROD_WITH_MPI
#include <mpi.h>

#include "comm/mpi_arrivals.h"
#include "comm/mpi_communicator.h"
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/cuda_device.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {
namespace {

static_assert(sizeof(NcclId) == sizeof(ncclUniqueId));

absl::Status nccl_status(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", ncclGetErrorString(rc)));
}

ncclDataType_t nccl_type(CommType t) {
  switch (t) {
    case CommType::kF32:
      return ncclFloat32;
    case CommType::kF64:
      return ncclFloat64;
    case CommType::kI64:
      return ncclInt64;
    case CommType::kBF16:
      return ncclBfloat16;
    case CommType::kF16:
      return ncclFloat16;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// NCCL would average integers with a truncating division; refused, as the
// MPI backend does.
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

WorkPtr failed(absl::Status s) { return completed_work(std::move(s)); }

class NcclCommunicatorImpl : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(int rank, int world, int device, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), device_(device), timeout_(timeout) {}

  absl::Status init(const NcclId& id) {
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    // Non-blocking, so the legacy default stream's implicit syncs never
    // serialize compute against communication: ordering comes only from the
    // compute-stream event.
    ZEROD_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    ZEROD_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc"));
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(scratch_, 0, sizeof(float), stream_), "cudaMemsetAsync"));
    ncclUniqueId uid;
    std::memcpy(&uid, id.bytes, sizeof(uid));
    ncclComm_t comm = nullptr;
    ZEROD_RETURN_IF_ERROR(nccl_status(ncclCommInitRank(&comm, world_, uid, rank_), "ncclCommInitRank"));
    comm_ = comm;
    return absl::OkStatus();
  }

  ~NcclCommunicatorImpl() override {
    if (comm_) {
      // Destroying waits for queued collectives, so it is only safe once the
      // stream has drained; a stuck (or broken) communicator is aborted.
      const bool drained = broken().ok() && cudaEventRecord(ready_, stream_) == cudaSuccess &&
                           wait_for(ready_, "draining the comm stream").ok();
      if (drained) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_) cudaFree(scratch_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
#ifdef ZEROD_WITH_MPI
    arrivals_.reset();
    if (finalize_mpi_) MPI_Finalize();
#endif
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend() const override { return "nccl"; }

  void set_compute_stream(Stream& stream) override { compute_ = cuda_stream(stream); }

  WorkPtr all_reduce(void* buf, int64_t count, CommType type, ReduceOp op) override {
    if (absl::Status s = check_average(type, op); !s.ok()) return failed(std::move(s));
    return issue("all_reduce",
                 [=, this] { return ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), comm_, stream_); });
  }

  WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, CommType type, ReduceOp op) override {
    if (absl::Status s = check_average(type, op); !s.ok()) return failed(std::move(s));
    return issue("reduce_scatter", [=, this] {
      return ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_, stream_);
    });
  }

  // NCCL treats send == block rank() of recv as in place by itself.
  WorkPtr all_gather(const void* send, void* recv, int64_t count, CommType type) override {
    return issue("all_gather", [=, this] { return ncclAllGather(send, recv, count, nccl_type(type), comm_, stream_); });
  }

  WorkPtr broadcast(void* buf, int64_t count, CommType type, int root) override {
    return issue("broadcast",
                 [=, this] { return ncclBroadcast(buf, buf, count, nccl_type(type), root, comm_, stream_); });
  }

  // A one-element all-reduce completes on no rank before every rank has
  // issued it.
  WorkPtr barrier() override {
    return issue("barrier",
                 [this] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }

  // NCCL is aborted first so this rank's GPU leaves any stuck collective;
  // MPI, when there is one, then ends every rank.
  void abort(int exit_code) override {
    ncclCommAbort(comm_);
#ifdef ZEROD_WITH_MPI
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
    std::_Exit(exit_code);
  }

#ifdef ZEROD_WITH_MPI
  void finalize_mpi_on_destruction() { finalize_mpi_ = true; }
  // Every collective is announced to the peers over MPI, so a timeout names
  // the ranks that have not reached it.
  void track_arrivals() { arrivals_ = std::make_unique<MpiArrivals>(); }
#endif

  // Polls `done` (sleeping 50 us, doubling up to 1 ms) until it completes,
  // NCCL reports an error, or the timeout passes; the last two break the
  // communicator. `what` names the collective in the error, `seq` its
  // number (0 for none).
  absl::Status wait_for(cudaEvent_t done, const std::string& what, int64_t seq = 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::chrono::microseconds pause(50);
    for (;;) {
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) {
        return break_with(
            absl::InternalError(absl::StrCat(what, " failed on rank ", rank_, ": ", cudaGetErrorString(q))));
      }
      if (absl::Status s = broken(); !s.ok()) return s;
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(comm_, &async);
      if (rc != ncclSuccess || async != ncclSuccess) {
        return break_with(absl::InternalError(
            absl::StrCat(what, " failed on rank ", rank_, ": ", ncclGetErrorString(rc != ncclSuccess ? rc : async))));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return break_with(absl::DeadlineExceededError(absl::StrFormat("%s did not complete within %.3g s: %s", what,
                                                                      timeout_.count() / 1000.0, who_is_missing(seq))));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }

 private:
  std::string who_is_missing(int64_t seq) {
#ifdef ZEROD_WITH_MPI
    if (arrivals_ && seq > 0) return arrivals_->describe_missing(seq);
#endif
    return absl::StrCat("on rank ", rank_);
  }

  // Numbers the collective, orders it after the compute stream's queued
  // work, enqueues it and records the event its Work waits on.
  WorkPtr issue(const char* name, const std::function<ncclResult_t()>& enqueue);

  absl::StatusOr<Event> enqueue_after_compute(const std::function<ncclResult_t()>& enqueue) {
    // The current device is per thread, and the issuing thread may not have
    // ours current.
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ready_, compute_), "cudaEventRecord"));
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent"));
    ZEROD_RETURN_IF_ERROR(nccl_status(enqueue(), "enqueueing"));
    cudaEvent_t raw = nullptr;
    ZEROD_RETURN_IF_ERROR(
        cuda_status(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    Event done(raw);
    ZEROD_RETURN_IF_ERROR(cuda_status(cudaEventRecord(done.get(), stream_), "cudaEventRecord"));
    return done;
  }

  absl::Status broken() const {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  // The first error that broke the communicator is the one every later call
  // reports.
  absl::Status break_with(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = std::move(s);
    return broken_;
  }

  const int rank_, world_, device_;
  const std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;   // the comm stream
  cudaStream_t compute_ = nullptr;  // nullptr: the default stream
  cudaEvent_t ready_ = nullptr;     // recorded on compute_, waited on by stream_
  void* scratch_ = nullptr;         // the barrier's one float
  int64_t next_seq_ = 1;
  mutable std::mutex mu_;
  absl::Status broken_;
#ifdef ZEROD_WITH_MPI
  bool finalize_mpi_ = false;
  std::unique_ptr<MpiArrivals> arrivals_;
#endif
};

class NcclWork : public Work {
 public:
  NcclWork(NcclCommunicatorImpl* owner, Event done, std::string what, int64_t seq)
      : owner_(owner), done_(std::move(done)), what_(std::move(what)), seq_(seq) {}
  absl::Status wait() override { return owner_->wait_for(done_.get(), what_, seq_); }

 private:
  NcclCommunicatorImpl* owner_;
  Event done_;
  std::string what_;  // "collective <name> #<seq>"
  int64_t seq_;
};

WorkPtr NcclCommunicatorImpl::issue(const char* name, const std::function<ncclResult_t()>& enqueue) {
  if (absl::Status s = broken(); !s.ok()) return failed(std::move(s));
  const int64_t seq = next_seq_++;
  std::string what = absl::StrFormat("collective %s #%d", name, seq);
#ifdef ZEROD_WITH_MPI
  if (arrivals_) arrivals_->announce(seq);
#endif
  absl::StatusOr<Event> done = enqueue_after_compute(enqueue);
  if (!done.ok()) {
    // Peers that did issue it would wait for this rank forever.
    return failed(break_with(absl::InternalError(
        absl::StrCat(what, " could not be issued on rank ", rank_, ": ", done.status().message()))));
  }
  return std::make_unique<NcclWork>(this, *std::move(done), std::move(what), seq);
}

absl::StatusOr<std::unique_ptr<NcclCommunicatorImpl>> join(int rank, int world_size, int local_rank, const NcclId& id,
                                                           std::chrono::milliseconds timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size || local_rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", world_size, " with local rank ", local_rank, " is not a place in a job"));
  }
  const int devices = cuda_device_count();
  if (devices == 0) return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " has no CUDA device for NCCL"));
  auto comm = std::make_unique<NcclCommunicatorImpl>(rank, world_size, local_rank % devices, timeout);
  ZEROD_RETURN_IF_ERROR(comm->init(id));
  return comm;
}

#ifdef ZEROD_WITH_MPI

// Rank 0's id, or word that it has none: a rank 0 that cannot make one must
// not leave the others waiting in the broadcast.
absl::StatusOr<NcclId> broadcast_nccl_id(int rank) {
  struct {
    NcclId id;
    char ok;
  } msg = {};
  absl::Status made;
  if (rank == 0) {
    absl::StatusOr<NcclId> id = make_nccl_id();
    made = id.status();
    if (id.ok()) msg = {*id, 1};
  }
  ZEROD_RETURN_IF_ERROR(mpi_status(MPI_Bcast(&msg, static_cast<int>(sizeof(msg)), MPI_BYTE, 0, MPI_COMM_WORLD),
                                   "broadcast of the NCCL id"));
  if (!msg.ok) return rank == 0 ? made : absl::UnavailableError("rank 0 could not make an NCCL id");
  return msg.id;
}

absl::StatusOr<std::unique_ptr<NcclCommunicatorImpl>> join_over_mpi(const RankInfo& rank,
                                                                    std::chrono::milliseconds timeout) {
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (mpi_rank != rank.rank || mpi_size != rank.world_size) {
    return absl::FailedPreconditionError(absl::StrCat("the launcher says rank ", rank.rank, " of ", rank.world_size,
                                                      " but MPI sees rank ", mpi_rank, " of ", mpi_size));
  }
  ZEROD_ASSIGN_OR_RETURN(NcclId id, broadcast_nccl_id(mpi_rank));
  ZEROD_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicatorImpl> comm,
                         join(rank.rank, rank.world_size, rank.local_rank, id, timeout));
  comm->track_arrivals();
  return comm;
}
#endif

}  // namespace

absl::StatusOr<NcclId> make_nccl_id() {
  ncclUniqueId uid;
  ZEROD_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&uid), "ncclGetUniqueId"));
  NcclId id;
  std::memcpy(id.bytes, &uid, sizeof(id.bytes));
  return id;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> make_nccl_communicator(int rank, int world_size, int local_rank,
                                                                         const NcclId& id,
                                                                         std::chrono::milliseconds timeout) {
  return join(rank, world_size, local_rank, id, timeout);
}

#ifdef ZEROD_WITH_MPI
absl::StatusOr<std::unique_ptr<NcclCommunicator>> make_nccl_communicator_over_mpi(const RankInfo& rank,
                                                                                  std::chrono::milliseconds timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Thread-multiple, as make_mpi_communicator asks, should it come second.
    int provided = 0;
    ZEROD_RETURN_IF_ERROR(mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "init"));
  }
  absl::StatusOr<std::unique_ptr<NcclCommunicatorImpl>> comm = join_over_mpi(rank, timeout);
  if (!initialized) {
    if (comm.ok()) {
      (*comm)->finalize_mpi_on_destruction();
    } else {
      MPI_Finalize();
    }
  }
  return comm;
}
#endif

}  // namespace zerod
