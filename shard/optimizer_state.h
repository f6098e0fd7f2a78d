// Where this rank's optimizer states and fp32 master weights live. One of
// two, chosen once from the config:
//   in memory: an Optimizer over the owned segments, on the device, or on
//     the host with offload_optimizer cpu; the masters are a buffer of their
//     own, or the fp32 working parameters themselves;
//   streamed (offload_optimizer nvme): a SwappedOptimizer on the host, whose
//     states (and masters, when they are not the parameters) live in a file
//     and pass through a few buffers sub-group by sub-group.
// Pieces follow the rank's owned segments.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "offload/swapped_optimizer.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/optim/optimizer.h"
#include "shard/zero_context.h"

namespace zerod {

class OptimizerState {
 public:
  // Elements [start, start + n) of piece k, into dst.
  using PieceFill = SwappedOptimizer::Fill;
  // Elements [start, start + n) of piece k's masters.
  using MasterOut = SwappedOptimizer::MasterOut;
  // Fills dst with bytes [offset, offset + n) of a state array.
  using ArrayFill = std::function<absl::Status(void* dst, uint64_t offset, uint64_t n)>;

  virtual ~OptimizerState() = default;
  // One update (`step` 1-based) with the gradients times grad_factor;
  // `grads` gives them where the pieces have none in memory; `updated` sees
  // every piece's new masters, in order.
  virtual absl::Status step(float lr, int64_t step, float grad_factor, const PieceFill& grads,
                            const MasterOut& updated) = 0;
  // Pieces [first, last) of an update, for one that runs a unit at a time
  // as the unit's gradients are complete: a unit's pieces, whose gradients
  // `grads` gives where they are not in memory. With `undoable` (after
  // allow_undo()), what they overwrite is kept: in memory their masters and
  // states are first copied aside; streamed, the records are written to
  // their second place in the file.
  virtual absl::Status step_pieces(float lr, int64_t step, float grad_factor, int first, int last,
                                   const PieceFill& grads, const MasterOut& updated, bool undoable = false) = 0;
  // step() enqueued on the stream of the optimizer's device, with the
  // factor read from `factor` (that device's memory) when it runs, and
  // skipped there where that is not finite (AdamStep::grad_scale_at): the
  // host waits for nothing. Only an optimizer in the memory of the device
  // whose kernels write the working copy can.
  virtual absl::Status enqueue_step(float /*lr*/, int64_t /*step*/, const float* /*factor*/) {
    return absl::FailedPreconditionError("an update on the stream needs the optimizer in the device's memory");
  }
  // For updates that start before their factor is known: in memory, room
  // to copy every piece's masters and states aside (as much memory again as
  // they take); streamed, a check that the file has a second place for each
  // record and the masters are in it.
  virtual absl::Status allow_undo() = 0;
  // Puts back the masters and states of every piece updated undoably since
  // the last undo() or commit(); `restored` sees their masters, in order.
  virtual absl::Status undo(const MasterOut& restored) = 0;
  // The updates by pieces stand: what they wrote is where it is kept (the
  // first failure of a write still in flight), and nothing is kept aside.
  virtual absl::Status commit() = 0;
  // Every piece's masters, in order, part by part.
  virtual absl::Status read_masters(const MasterOut& out) = 0;
  virtual absl::Status write_masters(const std::vector<const float*>& src) = 0;
  // The state arrays of an in-memory Optimizer over the same pieces (data
  // null when they are not in memory), and their bytes front to back.
  virtual std::vector<StateArray> state_arrays() const = 0;
  virtual absl::Status read_state(const StateArray& a, const ByteSink& out) = 0;
  virtual absl::Status write_state(const StateArray& a, const ArrayFill& in) = 0;
  // Whether everything is in memory, so copying it is a memcpy, not a read.
  virtual bool in_memory() const = 0;
  // The optimizer over the pieces, bound to memory, where it is in memory
  // (for updates over copies of it elsewhere: device_steps.h); else null.
  virtual const Optimizer* bound() const { return nullptr; }
};

// Where an optimizer's memory is and its updates run: the device's, or the
// host's; its memory of `tier` (the device's own where unset).
struct OptimizerPlace {
  Device& device;
  Kernels& kernels;
  std::optional<Tier> tier = std::nullopt;
};

// With `separate_masters` the masters get a buffer of their own; without,
// the pieces' `master` pointers are the fp32 parameters. `init` gives the
// initial masters.
absl::StatusOr<std::unique_ptr<OptimizerState>> in_memory_optimizer(ZeroContext& ctx, OptimizerPlace place,
                                                                    const OptimizerConfig& cfg,
                                                                    std::vector<ParamPiece> pieces,
                                                                    bool separate_masters, const OptimizerState::PieceFill& init);
absl::StatusOr<std::unique_ptr<OptimizerState>> streamed_optimizer(ZeroContext& ctx, const OptimizerConfig& cfg,
                                                                   std::vector<ParamPiece> pieces,
                                                                   bool separate_masters, const OptimizerState::PieceFill& init,
                                                                   const SwapSettings& settings);

// What each of those allocates, the first in host memory of `host` or
// else on plan's device (with `undoable`, also what allow_undo() keeps
// aside; with `saves_checkpoints`, what a save of its state takes).
void plan_in_memory_optimizer(const ZeroShape& shape, std::optional<Tier> host, const OptimizerConfig& cfg,
                              bool separate_masters,
                              bool undoable, bool saves_checkpoints, MemoryPlan& plan);
void plan_streamed_optimizer(const ZeroShape& shape, const OptimizerConfig& cfg, bool separate_masters,
                             const SwapSettings& settings, MemoryPlan& plan);

}  // namespace zerod
