#include "shard/optimizer_state.h"

#include <algorithm>

#include "runtime/core/profiler.h"
#include "shard/saved_shards.h"

namespace zerod {
namespace {

// Each piece's initial masters, written in d's memory.
absl::Status init_masters(Device& d, const std::vector<ParamPiece>& pieces, const OptimizerState::PieceFill& init) {
  for (size_t k = 0; k < pieces.size(); ++k) {
    ZEROD_RETURN_IF_ERROR(d.write_from_host(d.compute_stream(), pieces[k].master, pieces[k].numel * sizeof(float),
                                            host_elements<float>([&](float* p, int64_t start, int64_t n) {
                                              return init(static_cast<int>(k), start, n, p);
                                            })));
  }
  return absl::OkStatus();
}

// allow_undo()'s buffer: the states, then the masters from a 64-byte boundary.
uint64_t kept_masters_at(const Optimizer& o) { return (o.state_bytes() + 63) / 64 * 64; }

// An InMemoryOptimizer's buffers, by InMemoryBuffers, in memory of tier
// `at`: separate masters, the states, and what allow_undo() keeps.
enum InMemoryBuffers { kMasters, kStates, kKept };
std::vector<BufferSpec> in_memory_buffers(const ZeroShape& shape, Tier at, const OptimizerConfig& cfg,
                                          bool separate_masters, bool undoable) {
  const std::unique_ptr<Optimizer> o = Optimizer::create_unbound(cfg, piece_shapes(shape.owned), shape.dtype);
  const uint64_t masters = shape.part.shard_numel() * sizeof(float);
  return {{"fp32 master weights", Category::kOptimizer, masters, separate_masters ? 1 : 0, at},
          {"optimizer states", Category::kOptimizer, o->state_bytes(), 1, at},
          {"states and masters kept for an undo", Category::kOptimizer, kept_masters_at(*o) + masters, undoable ? 1 : 0,
           at}};
}

class InMemoryOptimizer : public OptimizerState {
 public:
  InMemoryOptimizer(ZeroContext& ctx, OptimizerPlace place)
      : ctx_(ctx),
        device_(place.device),
        kernels_(place.kernels),
        stream_(place.device.compute_stream()),
        tier_(place.tier.value_or(place.device.memory_tier())) {}

  absl::Status create(const OptimizerConfig& cfg, std::vector<ParamPiece> pieces, bool separate_masters,
                      const OptimizerState::PieceFill& init) {
    specs_ = in_memory_buffers(ctx_, tier_, cfg, separate_masters, /*undoable=*/true);
    if (specs_[kMasters].count > 0) {
      ZEROD_ASSIGN_OR_RETURN(masters_, allocate_spec(device_, specs_[kMasters]));
      for (size_t k = 0; k < pieces.size(); ++k) {
        pieces[k].master = masters_.ptr<float>() + ctx_.owned[k].shard_offset;
      }
    }
    ZEROD_RETURN_IF_ERROR(init_masters(device_, pieces, init));
    for (const ParamPiece& p : pieces) masters_of_.push_back({p.master, p.numel});
    optimizer_ = Optimizer::create_unbound(cfg, std::move(pieces), ctx_.dtype);
    ZEROD_ASSIGN_OR_RETURN(states_, allocate_spec(device_, specs_[kStates]));
    optimizer_->bind(states_.data());
    optimizer_->zero_states(device_, stream_);
    return absl::OkStatus();
  }

  // Masters in memory are updated in place: `updated` is for a working copy
  // kept elsewhere.
  absl::Status step(float lr, int64_t step, float grad_factor, const PieceFill&, const MasterOut& updated) override {
    return step_pieces(lr, step, grad_factor, 0, static_cast<int>(masters_of_.size()), {}, updated);
  }
  // The gradients are in memory.
  absl::Status step_pieces(float lr, int64_t step, float grad_factor, int first, int last, const PieceFill&,
                           const MasterOut& updated, bool undoable = false) override {
    // On the device the table's own spans time it.
    auto span = Profiler::host_span(&device_ == &ctx_.device ? nullptr : ctx_.device.profiler(), "host optimizer");
    if (undoable) {
      if (!kept_.data()) return absl::FailedPreconditionError("an undoable update without allow_undo()");
      for (int k = first; k < last; ++k) copy_aside(k, /*back=*/false);
    }
    optimizer_->step(kernels_, stream_, lr, step, grad_factor, first, last);
    ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));
    return updated ? read_masters(updated, first, last) : absl::OkStatus();
  }
  absl::Status enqueue_step(float lr, int64_t step, const float* factor) override {
    // The factor given is NaN: were the pointer lost, the update would skip.
    optimizer_->step(kernels_, stream_, lr, step, /*grad_scale=*/NAN, 0, -1, factor);
    return absl::OkStatus();
  }
  absl::Status read_masters(const MasterOut& out) override {
    return read_masters(out, 0, static_cast<int>(masters_of_.size()));
  }
  absl::Status read_masters(const MasterOut& out, int first, int last) {
    for (int k = first; k < last; ++k) {
      ZEROD_RETURN_IF_ERROR(device_.read_on_host(
          stream_, masters_of_[k].data, masters_of_[k].numel * sizeof(float),
          host_elements<float>([&](float* p, int64_t start, int64_t n) { return out(k, start, n, p); })));
    }
    return absl::OkStatus();
  }
  absl::Status write_masters(const std::vector<const float*>& src) override {
    for (size_t k = 0; k < masters_of_.size(); ++k) {
      device_.copy(stream_, masters_of_[k].data, src[k], masters_of_[k].numel * sizeof(float));
    }
    return device_.synchronize(stream_);
  }
  absl::Status allow_undo() override {
    ZEROD_ASSIGN_OR_RETURN(kept_, allocate_spec(device_, specs_[kKept]));
    is_kept_.assign(masters_of_.size(), false);
    return absl::OkStatus();
  }
  absl::Status undo(const MasterOut& restored) override {
    const int pieces = static_cast<int>(is_kept_.size());
    for (int k = 0; k < pieces; ++k) {
      if (is_kept_[k]) copy_aside(k, /*back=*/true);
    }
    ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));
    for (int k = 0; k < pieces; ++k) {
      if (is_kept_[k] && restored) ZEROD_RETURN_IF_ERROR(read_masters(restored, k, k + 1));
    }
    return commit();
  }
  absl::Status commit() override {
    std::fill(is_kept_.begin(), is_kept_.end(), false);
    return absl::OkStatus();
  }
  std::vector<StateArray> state_arrays() const override { return optimizer_->state_arrays(); }
  absl::Status read_state(const StateArray& a, const ByteSink& out) override {
    return device_.read_on_host(stream_, a.data, a.numel * dtype_size(a.dtype),
                                [&](void* p, uint64_t, uint64_t n) { return out(p, n); });
  }
  absl::Status write_state(const StateArray& a, const ArrayFill& in) override {
    return device_.write_from_host(stream_, a.data, a.numel * dtype_size(a.dtype), in);
  }
  bool in_memory() const override { return true; }
  const Optimizer* bound() const override { return optimizer_.get(); }

 private:
  struct Masters {
    float* data;
    int64_t numel;
  };
  // Where the masters start in kept_: after the states, aligned for floats.
  // Piece k's masters and states into kept_ (where the states' bytes lie as
  // in states_, then the masters as in the shard), or `back` from it.
  void copy_aside(int k, bool back) {
    char* states = states_.ptr<char>();
    char* kept = kept_.ptr<char>();
    auto move = [&](char* live, char* aside, uint64_t bytes) {
      device_.copy(stream_, back ? live : aside, back ? aside : live, bytes);
    };
    for (const Optimizer::ByteRange& r : optimizer_->piece_state_ranges(k)) {
      move(states + r.offset, kept + r.offset, r.bytes);
    }
    float* kept_masters = reinterpret_cast<float*>(kept + kept_masters_at(*optimizer_));
    move(reinterpret_cast<char*>(masters_of_[k].data),
         reinterpret_cast<char*>(kept_masters + ctx_.owned[k].shard_offset), masters_of_[k].numel * sizeof(float));
    if (!back) is_kept_[k] = true;
  }
  ZeroContext& ctx_;
  Device& device_;
  Kernels& kernels_;
  Stream& stream_;
  const Tier tier_;                // of the masters and states
  std::vector<BufferSpec> specs_;  // in_memory_buffers, kKept for allow_undo()
  Buffer masters_;                 // with separate masters
  Buffer states_;
  std::vector<Masters> masters_of_;
  std::unique_ptr<Optimizer> optimizer_;
  Buffer kept_;                // after allow_undo()
  std::vector<bool> is_kept_;  // per piece: in kept_ since the last commit
};

class StreamedOptimizer : public OptimizerState {
 public:
  StreamedOptimizer(std::unique_ptr<SwappedOptimizer> o, Profiler* profiler)
      : optimizer_(std::move(o)), profiler_(profiler) {}

  absl::Status step(float lr, int64_t step, float grad_factor, const PieceFill& grads,
                    const MasterOut& updated) override {
    auto span = Profiler::host_span(profiler_, "host optimizer, states streamed from NVMe");
    return optimizer_->step(lr, step, grad_factor, grads, updated);
  }
  absl::Status step_pieces(float lr, int64_t step, float grad_factor, int first, int last, const PieceFill& grads,
                           const MasterOut& updated, bool undoable) override {
    auto span = Profiler::host_span(profiler_, "host optimizer, states streamed from NVMe");
    return optimizer_->step_pieces(lr, step, grad_factor, first, last, grads, updated, undoable);
  }
  absl::Status allow_undo() override { return optimizer_->allow_undo(); }
  absl::Status undo(const MasterOut& restored) override {
    auto span = Profiler::host_span(profiler_, "host optimizer, states streamed from NVMe");
    return optimizer_->undo(restored);
  }
  absl::Status commit() override { return optimizer_->commit(); }
  absl::Status read_masters(const MasterOut& out) override { return optimizer_->read_masters(out); }
  absl::Status write_masters(const std::vector<const float*>& src) override { return optimizer_->write_masters(src); }
  std::vector<StateArray> state_arrays() const override { return optimizer_->state_layout(); }
  absl::Status read_state(const StateArray& a, const ByteSink& out) override {
    return optimizer_->read_state(a.name, out);
  }
  absl::Status write_state(const StateArray& a, const ArrayFill& in) override {
    return optimizer_->write_state(a.name, in);
  }
  bool in_memory() const override { return false; }

 private:
  std::unique_ptr<SwappedOptimizer> optimizer_;
  Profiler* profiler_;
};

}  // namespace

void plan_in_memory_optimizer(const ZeroShape& shape, std::optional<Tier> host, const OptimizerConfig& cfg,
                              bool separate_masters, bool undoable, bool saves_checkpoints, MemoryPlan& plan) {
  const bool on_host = host.has_value();
  plan.add(in_memory_buffers(shape, host.value_or(plan.device().memory), cfg, separate_masters, undoable));
  // Memory the host cannot reach is read and written through host staging
  // (the device's own): each piece's initial masters, and a checkpoint's
  // masters and states.
  if (on_host || plan.device().host_visible()) return;
  const std::unique_ptr<Optimizer> o = Optimizer::create_unbound(cfg, piece_shapes(shape.owned), shape.dtype);
  uint64_t piece = 0, array = 0;
  for (const ShardSegment& s : shape.owned) piece = std::max<uint64_t>(piece, s.numel * 4);
  for (const StateArray& a : o->state_arrays()) array = std::max<uint64_t>(array, a.numel * dtype_size(a.dtype));
  const char* what = "host staging of transfers to the device";
  plan.add(what, Tier::kHost, Category::kWorkspace, Device::host_staging_bytes(piece), Phase::kBuild, false);
  if (saves_checkpoints) {
    plan.add(what, Tier::kHost, Category::kWorkspace, Device::host_staging_bytes(std::max(piece, array)),
             Phase::kCheckpoint, false);
  }
}

void plan_streamed_optimizer(const ZeroShape& shape, const OptimizerConfig& cfg, bool separate_masters,
                             const SwapSettings& settings, MemoryPlan& plan) {
  plan.add(SwappedOptimizer::buffers(cfg, piece_shapes(shape.owned), shape.dtype, separate_masters, settings));
}

absl::StatusOr<std::unique_ptr<OptimizerState>> in_memory_optimizer(ZeroContext& ctx, OptimizerPlace place,
                                                                    const OptimizerConfig& cfg,
                                                                    std::vector<ParamPiece> pieces,
                                                                    bool separate_masters,
                                                                    const OptimizerState::PieceFill& init) {
  auto o = std::make_unique<InMemoryOptimizer>(ctx, place);
  ZEROD_RETURN_IF_ERROR(o->create(cfg, std::move(pieces), separate_masters, init));
  return o;
}

absl::StatusOr<std::unique_ptr<OptimizerState>> streamed_optimizer(ZeroContext& ctx, const OptimizerConfig& cfg,
                                                                   std::vector<ParamPiece> pieces,
                                                                   bool separate_masters,
                                                                   const OptimizerState::PieceFill& init,
                                                                   const SwapSettings& settings) {
  // Masters that are the parameters (memory the host reaches) are set in
  // place; separate ones are written to the file as it is laid out. The
  // updates run on the host.
  if (!separate_masters) ZEROD_RETURN_IF_ERROR(init_masters(ctx.device, pieces, init));
  ZEROD_ASSIGN_OR_RETURN(
      std::unique_ptr<SwappedOptimizer> o,
      SwappedOptimizer::create(cfg, std::move(pieces), ctx.dtype, separate_masters ? init : OptimizerState::PieceFill{},
                               settings, ctx.host, ctx.host_kernels));
  return std::make_unique<StreamedOptimizer>(std::move(o), ctx.device.profiler());
}

}  // namespace zerod
