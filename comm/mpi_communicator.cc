#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/comm_thread.h"
#include "comm/mpi_arrivals.h"

namespace zerod {

absl::Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return absl::InternalError(absl::StrCat("MPI ", what, " failed: ", std::string(text, len)));
}

namespace {

MPI_Datatype mpi_type(CommType t) {
  switch (t) {
    case CommType::kF32:
      return MPI_FLOAT;
    case CommType::kF64:
      return MPI_DOUBLE;
    case CommType::kI64:
      return MPI_INT64_T;
    case CommType::kBF16:
    case CommType::kF16:
      return MPI_UINT16_T;  // moved, never reduced
  }
  return MPI_BYTE;
}

// Reductions MPI cannot do on our 16-bit types, and averages (a sum that the
// comm thread then divides).
absl::Status check_reduction(CommType t, ReduceOp op) {
  if (t == CommType::kBF16 || t == CommType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("cannot ", reduce_op_name(op), "-reduce 16-bit buffers over MPI"));
  }
  return check_average(t, op);
}

void divide(void* buf, int64_t count, CommType t, int n) {
  if (t == CommType::kF32) {
    auto* p = static_cast<float*>(buf);
    for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
  } else if (t == CommType::kF64) {
    auto* p = static_cast<double*>(buf);
    for (int64_t i = 0; i < count; ++i) p[i] /= n;
  }
}

// MPI counts are int: large buffers go in chunks of whole elements.
constexpr int64_t kMaxCount = int64_t(1) << 30;

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(bool owns_mpi, std::chrono::milliseconds timeout) : owns_mpi_(owns_mpi) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    arrivals_ = std::make_unique<MpiArrivals>();
    thread_ = std::make_unique<CommThread>(
        timeout, [this](const std::string&, int64_t seq) { return arrivals_->describe_missing(seq); });
  }

  ~MpiCommunicator() override {
    // A comm thread still inside MPI rules out finalizing.
    if (!thread_->shutdown()) return;
    arrivals_.reset();
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  const char* backend() const override { return "mpi"; }

  WorkPtr all_reduce(void* buf, int64_t count, CommType type, ReduceOp op) override {
    return submit("all_reduce", [=, this]() -> absl::Status {
      ZEROD_RETURN_IF_ERROR(check_reduction(type, op));
      const MPI_Op mop = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
      const int size = comm_type_size(type);
      for (int64_t at = 0; at < count; at += kMaxCount) {
        const int n = static_cast<int>(std::min(kMaxCount, count - at));
        ZEROD_RETURN_IF_ERROR(
            mpi_status(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(buf) + at * size, n, mpi_type(type), mop, comm_),
                       "all_reduce"));
      }
      if (op == ReduceOp::kAvg) divide(buf, count, type, world_);
      return absl::OkStatus();
    });
  }

  WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, CommType type, ReduceOp op) override {
    return submit("reduce_scatter", [=, this]() -> absl::Status {
      ZEROD_RETURN_IF_ERROR(check_reduction(type, op));
      if (count > kMaxCount) {
        return absl::InvalidArgumentError(
            absl::StrCat("reduce_scatter of ", count, " elements per rank: at most ", kMaxCount, " are supported"));
      }
      const MPI_Op mop = op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
      ZEROD_RETURN_IF_ERROR(mpi_status(
          MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), mpi_type(type), mop, comm_), "reduce_scatter"));
      if (op == ReduceOp::kAvg) divide(recv, count, type, world_);
      return absl::OkStatus();
    });
  }

  WorkPtr all_gather(const void* send, void* recv, int64_t count, CommType type) override {
    return submit("all_gather", [=, this]() -> absl::Status {
      if (count > kMaxCount) {
        return absl::InvalidArgumentError(
            absl::StrCat("all_gather of ", count, " elements per rank: at most ", kMaxCount, " are supported"));
      }
      const char* mine = static_cast<const char*>(recv) + int64_t(rank_) * count * comm_type_size(type);
      const void* src = send == mine ? MPI_IN_PLACE : send;
      const int n = static_cast<int>(count);
      return mpi_status(MPI_Allgather(src, n, mpi_type(type), recv, n, mpi_type(type), comm_), "all_gather");
    });
  }

  WorkPtr broadcast(void* buf, int64_t count, CommType type, int root) override {
    return submit("broadcast", [=, this]() -> absl::Status {
      const int size = comm_type_size(type);
      for (int64_t at = 0; at < count; at += kMaxCount) {
        const int n = static_cast<int>(std::min(kMaxCount, count - at));
        ZEROD_RETURN_IF_ERROR(
            mpi_status(MPI_Bcast(static_cast<char*>(buf) + at * size, n, mpi_type(type), root, comm_), "broadcast"));
      }
      return absl::OkStatus();
    });
  }

  WorkPtr barrier() override {
    return submit("barrier", [this]() { return mpi_status(MPI_Barrier(comm_), "barrier"); });
  }

  void abort(int exit_code) override { MPI_Abort(MPI_COMM_WORLD, exit_code); }

 private:
  // Before running collective `seq`, tell every peer that this rank has
  // reached it; a peer that times out reads these to name the ranks that
  // have not.
  WorkPtr submit(const char* name, std::function<absl::Status()> run) {
    return thread_->submit(name, [this, run = std::move(run)](int64_t seq) {
      arrivals_->announce(seq);
      absl::Status s = run();
      arrivals_->drain();
      return s;
    });
  }

  bool owns_mpi_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  std::unique_ptr<MpiArrivals> arrivals_;
  std::unique_ptr<CommThread> thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> make_mpi_communicator(std::chrono::milliseconds timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool owns = false;
  if (!initialized) {
    int provided = 0;
    ZEROD_RETURN_IF_ERROR(mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "init"));
    owns = true;
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();
      return absl::FailedPreconditionError(
          "this MPI library does not support MPI_THREAD_MULTIPLE, which the comm thread needs");
    }
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(owns, timeout));
}

}  // namespace zerod
