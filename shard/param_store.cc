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
  Buffer memory_;      // the working copy: every parameter, or the shard
  UploadRing upload_;  // after memory_: its copies end before the memory goes
};

// Stages 0-2: the padded full buffer on every rank; the rank's own chunks
// are written by the optimizer and all-gathered into the others'.
class ReplicatedParams : public InMemoryParams {
 public:
  using InMemoryParams::InMemoryParams;

  // The parameters; FlatWeights its staging, the ring its parts.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape) {
    std::vector<BufferSpec> specs = {{"parameters", shape.params, shape.part.padded_numel() * dtype_size(shape.dtype)}};
    for (BufferSpec& b : weight_staging_buffers(shape.layout, shape.dtype, shape.operands))
      specs.push_back(std::move(b));
    return specs;
  }

  absl::Status allocate() {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(memory_, buffers(ctx_)[0]));
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

  // The shard, then its GatheredWeights's.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z) {
    std::vector<BufferSpec> specs = {
        {"parameter shard", shape.params, shape.part.shard_numel() * dtype_size(shape.dtype)}};
    for (BufferSpec& b : GatheredWeights::buffers(shape, z)) specs.push_back(std::move(b));
    return specs;
  }

  absl::Status allocate(const ZeroConfig& z) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(memory_, buffers(ctx_, z)[0]));
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

  // The store's, its writer's window, the GatheredWeights's.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z,
                                         const ShardStoreSettings& settings, bool written_during_backward) {
    const Partition& p = shape.part;
    std::vector<BufferSpec> specs = ShardStore::buffers(p.chunks(), p.chunk(1), shape.dtype, settings);
    if (written_during_backward) {
      for (BufferSpec& b : ShardStore::window_buffers(p.chunks(), p.chunk(1), shape.dtype, settings.category,
                                                      settings.host_tier, kWriterBuffers)) {
        specs.push_back(std::move(b));
      }
    }
    for (BufferSpec& b : GatheredWeights::buffers(shape, z)) specs.push_back(std::move(b));
    return specs;
  }

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
  GatheredWeights weights_;             // after store_: its gathers end before the store goes
};

}  // namespace

std::vector<BufferSpec> param_store_buffers(const ZeroShape& shape, const ZeroConfig& z, const ParamStoreChoice& c,
                                            const PlanDevice& device) {
  std::vector<BufferSpec> specs;
  switch (c.kind) {
    case ParamStoreChoice::kReplicated:
      specs = ReplicatedParams::buffers(shape);
      break;
    case ParamStoreChoice::kSharded:
      specs = ShardedParams::buffers(shape, z);
      break;
    case ParamStoreChoice::kOffloaded:
      return OffloadedParams::buffers(shape, z, c.offload, c.written_during_backward);
  }
  // The ring allocates its parts at its first write where they are needed.
  BufferSpec ring = UploadRing::buffers(c.staging);
  if (!c.written_from_host || device.host_visible()) ring.count = 0;
  specs.push_back(std::move(ring));
  return specs;
}

absl::StatusOr<std::unique_ptr<ParamStore>> create_param_store(ZeroContext& ctx, const ZeroConfig& z,
                                                               ParamStoreChoice c, LayerUnpack unpack) {
  switch (c.kind) {
    case ParamStoreChoice::kReplicated:
      return allocated<ParamStore>(std::make_unique<ReplicatedParams>(ctx, c.staging));
    case ParamStoreChoice::kSharded:
      return allocated<ParamStore>(std::make_unique<ShardedParams>(ctx, c.staging, std::move(unpack)), z);
    case ParamStoreChoice::kOffloaded:
      return allocated<ParamStore>(std::make_unique<OffloadedParams>(ctx, std::move(unpack)), z, std::move(c.offload),
                                   c.written_during_backward);
  }
  return absl::InternalError("unknown parameter store");
}

}  // namespace zerod
