#include "comm/communicator.h"

namespace zerod {
namespace {

class CompletedWork : public Work {
 public:
  explicit CompletedWork(absl::Status s) : status_(std::move(s)) {}
  absl::Status wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

WorkPtr completed_work(absl::Status s) { return std::make_unique<CompletedWork>(std::move(s)); }

int comm_type_size(CommType t) {
  switch (t) {
    case CommType::kF32:
      return 4;
    case CommType::kF64:
    case CommType::kI64:
      return 8;
    case CommType::kBF16:
    case CommType::kF16:
      return 2;
  }
  return 1;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

absl::Status check_average(CommType t, ReduceOp op) {
  if (op == ReduceOp::kAvg && t == CommType::kI64) return absl::InvalidArgumentError("cannot average integer buffers");
  return absl::OkStatus();
}

}  // namespace zerod
