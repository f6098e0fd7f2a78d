// Collectives among the ranks of one job, behind one interface.
//
// Every operation is asynchronous: it is queued in issue order and runs on
// the backend's own thread (CPU) or stream (GPU) while the caller computes;
// the returned Work is waited on before the buffers are touched again. All
// ranks must issue the same collectives in the same order. Each collective
// gets a sequence number (1, 2, ... in issue order, equal on every rank), so
// a wait that outlives the collective timeout can say which collective is
// stuck and which ranks have not arrived at it; after that the communicator
// is broken and every further call fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/status.h"

namespace zerod {

enum class ReduceOp { kSum, kAvg, kMax };
// Element types of collectives: reductions need to know them, gathers and
// broadcasts only their size.
enum class CommType { kF32, kF64, kI64, kBF16, kF16 };
int comm_type_size(CommType t);
const char* reduce_op_name(ReduceOp op);
// Every backend refuses an average of integers.
absl::Status check_average(CommType t, ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is complete (or the communicator's timeout
  // passes); OK once complete, and again on later calls.
  virtual absl::Status wait() = 0;
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "local", "mpi" or "nccl".
  virtual const char* backend() const = 0;

  // In place over `count` elements of `buf`.
  virtual WorkPtr all_reduce(void* buf, int64_t count, CommType type, ReduceOp op) = 0;
  // `send` holds world_size blocks of `count` elements; rank r receives the
  // reduction of everyone's block r into `recv` (which must not overlap send).
  virtual WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, CommType type, ReduceOp op) = 0;
  // Rank r's `count` elements land in block r of `recv` (world_size blocks).
  // `send` may be block rank() of `recv` itself (in place).
  virtual WorkPtr all_gather(const void* send, void* recv, int64_t count, CommType type) = 0;
  virtual WorkPtr broadcast(void* buf, int64_t count, CommType type, int root) = 0;
  virtual WorkPtr barrier() = 0;

  // Ends the whole job at once after an unrecoverable error on this rank
  // (peers would otherwise wait in a collective until their timeout).
  virtual void abort(int exit_code) = 0;
};

// A Work that is already complete with `s` (for collectives refused before
// they start, and for worlds of one).
WorkPtr completed_work(absl::Status s = absl::OkStatus());

// Blocking forms of the above.
inline absl::Status all_reduce(Communicator& c, void* buf, int64_t count, CommType type, ReduceOp op) {
  return c.all_reduce(buf, count, type, op)->wait();
}

// A world of one: every collective is a copy, done before the call returns.
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace zerod
