// The held-out set's loss (Trainer::evaluate).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "runtime/engine/trainer.h"

namespace zerod {

absl::StatusOr<EvalResult> Trainer::evaluate() {
  if (!eval_) return absl::FailedPreconditionError("evaluate: the job has no data.eval");
  const int B = cfg_.micro_batch, T = cfg_.data.seq_len, world = comm_->world_size(), rank = comm_->rank();
  int64_t n = eval_->size();
  if (cfg_.run.eval.batches > 0) n = std::min<int64_t>(n, cfg_.run.eval.batches * B * world);
  // Rank r scores the set's windows r, r + world, ...; every rank makes as
  // many passes as the rank with the most (ZeRO-3's gathers are
  // collective), a rank with none left scoring one window of no target.
  const int64_t passes = ((n + world - 1) / world + B - 1) / B;
  int32_t* inputs = inputs_.host<int32_t>();
  int32_t* targets = targets_.host<int32_t>();
  int32_t* positions = eval_->packed() ? positions_.host<int32_t>() : nullptr;
  double sum = 0;
  int64_t counted = 0;
  for (int64_t p = 0; p < passes; ++p) {
    int rows = 0;
    for (; rows < B; ++rows) {
      const int64_t i = (p * B + rows) * world + rank;
      if (i >= n) break;
      const int64_t at = int64_t(rows) * T;
      counted += eval_->read(i, inputs + at, targets + at, positions ? positions + at : nullptr);
    }
    if (rows == 0) {
      std::fill(inputs, inputs + T, 0);
      std::fill(targets, targets + T, -1);
      if (positions) std::iota(positions, positions + T, 0);
      rows = 1;
    }
    ZEROD_ASSIGN_OR_RETURN(const double loss, model_->loss_sum(weights(), inputs, targets, rows, T, positions));
    sum += loss;
  }
  ZEROD_RETURN_IF_ERROR(all_reduce(*comm_, &sum, 1, CommType::kF64, ReduceOp::kSum));
  ZEROD_RETURN_IF_ERROR(all_reduce(*comm_, &counted, 1, CommType::kI64, ReduceOp::kSum));
  const double loss = sum / static_cast<double>(std::max<int64_t>(counted, 1));
  // A loss that overflowed would stand as the best forever and could not
  // be saved in a manifest.
  if (!std::isfinite(loss)) return absl::InternalError(absl::StrCat("the held-out loss is not finite (", loss, ")"));
  return EvalResult{steps_, loss, counted};
}

}  // namespace zerod
