#include "shard/param_store.h"

#include "shard/gathered_weights.h"

namespace zerod {
namespace {

// A working copy in memory: the optimizer writes it in place, and host
// values are converted into it.
class InMemoryParams : public ParamStore {
 public:
  explicit InMemoryParams(ZeroContext& ctx) : ctx_(ctx) {}
  bool in_memory() const override { return true; }
  absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) override {
    const int64_t ds = dtype_size(ctx_.dtype);
    return ctx_.device.write_from_host(ctx_.stream, static_cast<char*>(working(s)) + start * ds, n * ds,
                                       [&](void* p, uint64_t offset, uint64_t bytes) {
                                         convert_from_f32(ctx_.dtype, src + offset / ds, p, bytes / ds);
                                         return absl::OkStatus();
                                       });
  }

 protected:
  ZeroContext& ctx_;
};

// Stages 0-2: the padded full buffer on every rank; the rank's own chunks
// are written by the optimizer and all-gathered into the others'.
class ReplicatedParams : public InMemoryParams {
 public:
  explicit ReplicatedParams(ZeroContext& ctx) : InMemoryParams(ctx) {}

  absl::Status allocate() {
    ZEROD_RETURN_IF_ERROR(
        ctx_.alloc(params_, ctx_.part.padded_numel() * dtype_size(ctx_.dtype), Category::kParams));
    ZEROD_ASSIGN_OR_RETURN(FlatWeights w, FlatWeights::create(&ctx_.layout, ctx_.dtype, params_.data(), ctx_.device,
                                                              ctx_.kernels, ctx_.part.padded_unit_offsets()));
    weights_ = std::make_unique<FlatWeights>(std::move(w));
    return absl::OkStatus();
  }

  WeightSource& weights() override { return *weights_; }
  void* working(const ShardSegment& s) override {
    return params_.ptr<char>() + ctx_.padded_index(s) * dtype_size(ctx_.dtype);
  }

  absl::Status publish() override {
    const Partition& p = ctx_.part;
    if (p.world_size() > 1) {
      const int64_t ds = dtype_size(ctx_.dtype);
      std::vector<WorkPtr> works;
      for (int u = 0; u < p.num_units(); ++u) {
        char* unit = params_.ptr<char>() + p.padded_offset(u) * ds;
        works.push_back(
            ctx_.comm.all_gather(unit + ctx_.owner * p.chunk(u) * ds, unit, p.chunk(u), comm_type(ctx_.dtype)));
      }
      ZEROD_RETURN_IF_ERROR(wait_all(works));
    }
    weights_->invalidate();
    return absl::OkStatus();
  }

 private:
  Buffer params_;
  std::unique_ptr<FlatWeights> weights_;
};

// Stage 3 in memory: the rank's shard, gathered unit by unit for the model.
class ShardedParams : public InMemoryParams, public ShardSource {
 public:
  explicit ShardedParams(ZeroContext& ctx) : InMemoryParams(ctx), weights_(ctx, *this) {}

  absl::Status allocate(const ZeroConfig& z) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, ctx_.part.shard_numel() * dtype_size(ctx_.dtype), Category::kParams));
    return weights_.allocate(z);
  }

  WeightSource& weights() override { return weights_; }
  void* working(const ShardSegment& s) override {
    return shard_.ptr<char>() + s.shard_offset * dtype_size(ctx_.dtype);
  }
  absl::Status publish() override { return weights_.invalidate(); }

  absl::StatusOr<const void*> acquire(int u) override {
    return shard_.ptr<char>() + ctx_.part.shard_offset(u) * dtype_size(ctx_.dtype);
  }

 private:
  Buffer shard_;
  GatheredWeights weights_;  // after shard_: its gathers end before the shard goes
};

// Stage 3 with offload_param: the shard in a ShardStore, whose window the
// gathers read from, a unit ahead.
class OffloadedParams : public ParamStore, public ShardSource {
 public:
  explicit OffloadedParams(ZeroContext& ctx) : ctx_(ctx), weights_(ctx, *this) {}

  absl::Status allocate(const ZeroConfig& z, ShardStoreSettings settings) {
    const Partition& p = ctx_.part;
    ZEROD_ASSIGN_OR_RETURN(store_, ShardStore::create(p.chunks(), p.chunk(1), ctx_.dtype, std::move(settings)));
    return weights_.allocate(z);
  }

  WeightSource& weights() override { return weights_; }
  bool in_memory() const override { return false; }
  void* working(const ShardSegment&) override { return nullptr; }
  absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) override {
    return store_->put(s.shard_offset + start, src, n);
  }
  absl::Status updated(const ShardSegment& s, int64_t start, const float* master, int64_t n) override {
    return write(s, start, master, n);
  }
  absl::Status publish() override {
    ZEROD_RETURN_IF_ERROR(store_->flush());
    return weights_.invalidate();
  }

  absl::StatusOr<const void*> acquire(int u) override { return store_->acquire(u); }
  void release(int u) override { store_->release(u); }
  absl::Status read_ahead(int u) override { return store_->fetch(u); }
  absl::Status drop() override { return store_->drop(); }

 private:
  ZeroContext& ctx_;
  std::unique_ptr<ShardStore> store_;
  GatheredWeights weights_;  // after store_: its gathers end before the store goes
};

}  // namespace

absl::StatusOr<std::unique_ptr<ParamStore>> replicated_params(ZeroContext& ctx) {
  return allocated<ParamStore>(std::make_unique<ReplicatedParams>(ctx));
}

absl::StatusOr<std::unique_ptr<ParamStore>> sharded_params(ZeroContext& ctx, const ZeroConfig& z) {
  return allocated<ParamStore>(std::make_unique<ShardedParams>(ctx), z);
}

absl::StatusOr<std::unique_ptr<ParamStore>> offloaded_params(ZeroContext& ctx, const ZeroConfig& z,
                                                             ShardStoreSettings settings) {
  return allocated<ParamStore>(std::make_unique<OffloadedParams>(ctx), z, std::move(settings));
}

}  // namespace zerod
