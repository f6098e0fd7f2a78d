#include "shard/param_store.h"

#include "shard/upload_ring.h"

namespace zerod {
namespace {

// Units written during backward go through a writer with two buffers: one
// unit's write-back overlaps the filling of the next.
constexpr int kWriterBuffers = 2;

// A working copy in memory: an optimizer on the device writes it in place,
// and host values are uploaded into it.
class InMemoryParams : public ParamStore {
 public:
  InMemoryParams(ZeroContext& ctx, Tier staging) : ctx_(ctx), upload_(ctx.device, staging) {}
  bool in_memory() const override { return true; }
  absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) override {
    return upload_.write(static_cast<char*>(working(s)) + start * dtype_size(ctx_.dtype), ctx_.dtype, src, n);
  }

 protected:
  ZeroContext& ctx_;
  Buffer memory_;     // the working copy: every parameter, or the shard
  UploadRing upload_;  // after memory_: its copies end before the memory goes
};

// Stages 0-2: the padded full buffer on every rank; the rank's own chunks
// are written by the optimizer and all-gathered into the others'.
class ReplicatedParams : public InMemoryParams {
 public:
  using InMemoryParams::InMemoryParams;

  absl::Status allocate() {
    ZEROD_RETURN_IF_ERROR(
        ctx_.alloc(memory_, ctx_.part.padded_numel() * dtype_size(ctx_.dtype), ctx_.params));
    ZEROD_ASSIGN_OR_RETURN(FlatWeights w, FlatWeights::create(&ctx_.layout, ctx_.dtype, memory_.data(), ctx_.device,
                                                              ctx_.kernels, ctx_.part.padded_unit_offsets()));
    weights_ = std::make_unique<FlatWeights>(std::move(w));
    return absl::OkStatus();
  }

  WeightSource& weights() override { return *weights_; }
  void* working(const ShardSegment& s) override {
    return memory_.ptr<char>() + ctx_.padded_index(s) * dtype_size(ctx_.dtype);
  }

  absl::Status publish() override {
    ZEROD_RETURN_IF_ERROR(upload_.flush());
    const Partition& p = ctx_.part;
    if (p.world_size() > 1) {
      const int64_t ds = dtype_size(ctx_.dtype);
      std::vector<WorkPtr> works;
      for (int u = 0; u < p.num_units(); ++u) {
        char* unit = memory_.ptr<char>() + p.padded_offset(u) * ds;
        works.push_back(
            ctx_.comm.all_gather(unit + ctx_.owner * p.chunk(u) * ds, unit, p.chunk(u), comm_type(ctx_.dtype)));
      }
      ZEROD_RETURN_IF_ERROR(wait_all(works));
    }
    weights_->invalidate();
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<FlatWeights> weights_;
};

// Stage 3 in memory: the rank's shard, gathered unit by unit for the model.
class ShardedParams : public InMemoryParams, public ShardSource {
 public:
  ShardedParams(ZeroContext& ctx, Tier staging, LayerUnpack unpack)
      : InMemoryParams(ctx, staging), weights_(ctx, *this, std::move(unpack)) {}

  absl::Status allocate(const ZeroConfig& z) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(memory_, ctx_.part.shard_numel() * dtype_size(ctx_.dtype), ctx_.params));
    return weights_.allocate(z);
  }

  WeightSource& weights() override { return weights_; }
  void* working(const ShardSegment& s) override {
    return memory_.ptr<char>() + s.shard_offset * dtype_size(ctx_.dtype);
  }
  absl::Status publish() override {
    ZEROD_RETURN_IF_ERROR(upload_.flush());
    return weights_.invalidate();
  }

  absl::StatusOr<const void*> acquire(int u) override {
    return memory_.ptr<char>() + ctx_.part.shard_offset(u) * dtype_size(ctx_.dtype);
  }

 private:
  GatheredWeights weights_;  // its gathers end before the shard goes
};

// Stage 3 with offload_param: the shard in a ShardStore, whose window the
// gathers read from, a unit ahead. Where units are written during backward
// (on the host thread, while the gathers go on) they go through a writer
// with a window of its own.
class OffloadedParams : public ParamStore, public ShardSource {
 public:
  OffloadedParams(ZeroContext& ctx, LayerUnpack unpack) : ctx_(ctx), weights_(ctx, *this, std::move(unpack)) {}

  absl::Status allocate(const ZeroConfig& z, ShardStoreSettings settings, bool written_during_backward) {
    const Partition& p = ctx_.part;
    ZEROD_ASSIGN_OR_RETURN(store_, ShardStore::create(p.chunks(), p.chunk(1), ctx_.dtype, std::move(settings)));
    if (written_during_backward) {
      ZEROD_ASSIGN_OR_RETURN(writer_, store_->writer(kWriterBuffers));
    }
    return weights_.allocate(z);
  }

  WeightSource& weights() override { return weights_; }
  bool in_memory() const override { return false; }
  void* working(const ShardSegment&) override { return nullptr; }
  void* working_on_host(const ShardSegment& s) override {
    char* record = static_cast<char*>(store_->host_record(s.unit));
    if (!record) return nullptr;
    return record + (s.shard_offset - ctx_.part.shard_offset(s.unit)) * dtype_size(ctx_.dtype);
  }
  absl::Status write(const ShardSegment& s, int64_t start, const float* src, int64_t n) override {
    return (writer_ ? *writer_ : *store_).put(s.shard_offset + start, src, n);
  }
  absl::Status publish() override {
    if (writer_) ZEROD_RETURN_IF_ERROR(writer_->flush());
    ZEROD_RETURN_IF_ERROR(store_->flush());
    return weights_.invalidate();
  }

  bool on_host() const override { return true; }
  absl::StatusOr<const void*> acquire(int u) override { return store_->acquire(u); }
  void release(int u) override { store_->release(u); }
  absl::Status read_ahead(int u) override { return store_->fetch(u); }
  absl::Status drop() override { return store_->drop(); }

 private:
  ZeroContext& ctx_;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<ShardStore> writer_;  // after store_, which outlives it
  GatheredWeights weights_;  // after store_: its gathers end before the store goes
};

void plan_upload(bool written_from_host, Tier staging, MemoryPlan& plan) {
  if (written_from_host && !plan.device().host_visible()) UploadRing::plan(staging, plan);
}

}  // namespace

void plan_replicated_params(const ZeroShape& shape, bool written_from_host, Tier staging, MemoryPlan& plan) {
  plan.add_device("parameters", shape.params, shape.part.padded_numel() * dtype_size(shape.dtype));
  plan_weight_staging(shape.layout, shape.dtype, shape.operands, plan);
  plan_upload(written_from_host, staging, plan);
}

void plan_sharded_params(const ZeroShape& shape, const ZeroConfig& z, bool written_from_host, Tier staging,
                         MemoryPlan& plan) {
  plan.add_device("parameter shard", shape.params, shape.part.shard_numel() * dtype_size(shape.dtype));
  GatheredWeights::plan(shape, z, plan);
  plan_upload(written_from_host, staging, plan);
}

void plan_offloaded_params(const ZeroShape& shape, const ZeroConfig& z, const ShardStoreSettings& settings,
                           bool written_during_backward, MemoryPlan& plan) {
  const Partition& p = shape.part;
  ShardStore::plan(p.chunks(), p.chunk(1), shape.dtype, settings, plan);
  if (written_during_backward) {
    ShardStore::plan_writer(p.chunks(), p.chunk(1), shape.dtype, settings, kWriterBuffers, plan);
  }
  GatheredWeights::plan(shape, z, plan);
}

absl::StatusOr<std::unique_ptr<ParamStore>> replicated_params(ZeroContext& ctx, Tier staging) {
  return allocated<ParamStore>(std::make_unique<ReplicatedParams>(ctx, staging));
}

absl::StatusOr<std::unique_ptr<ParamStore>> sharded_params(ZeroContext& ctx, const ZeroConfig& z, Tier staging,
                                                           LayerUnpack unpack) {
  return allocated<ParamStore>(std::make_unique<ShardedParams>(ctx, staging, std::move(unpack)), z);
}

absl::StatusOr<std::unique_ptr<ParamStore>> offloaded_params(ZeroContext& ctx, const ZeroConfig& z,
                                                             ShardStoreSettings settings,
                                                             bool written_during_backward, LayerUnpack unpack) {
  return allocated<ParamStore>(std::make_unique<OffloadedParams>(ctx, std::move(unpack)), z, std::move(settings),
                               written_during_backward);
}

}  // namespace zerod
