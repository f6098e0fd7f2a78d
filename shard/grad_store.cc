#include "shard/grad_store.h"

#include <algorithm>
#include <cstring>

#include "shard/host_adds.h"
#include "shard/scatter_grads.h"

namespace zerod {

absl::Status GradStore::read(const ShardSegment& s, int64_t start, int64_t n, float* dst) {
  Device& d = on_host() ? ctx_.host : ctx_.device;
  d.copy(d.compute_stream(), dst, owned(s) + start, n * sizeof(float));
  return d.synchronize(d.compute_stream());
}

namespace {

// Stages 0 and 1: backward adds into the padded full buffer.
class FullGrads : public GradStore {
 public:
  FullGrads(ZeroContext& ctx, bool scatter) : GradStore(ctx), scatter_(scatter) {}

  enum Buffers { kFullGrads, kShard, kHostShard };
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, bool scatter, std::optional<Tier> host_tier) {
    const Partition& p = shape.part;
    const uint64_t shard = p.shard_numel() * 4;
    return {{"gradients", Category::kGrads, static_cast<uint64_t>(p.padded_numel() * 4)},
            {"reduced gradient shard", Category::kGrads, shard, scatter ? 1 : 0},
            {"reduced gradient shard on the host", Category::kGrads, shard, host_tier ? 1 : 0, host_tier}};
  }

  absl::Status allocate(std::optional<Tier> host_tier) {
    const std::vector<BufferSpec> specs = buffers(ctx_, scatter_, host_tier);
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(full_, specs[kFullGrads]));
    if (specs[kShard].count > 0) ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, specs[kShard]));
    if (specs[kHostShard].count > 0) ZEROD_RETURN_IF_ERROR(ctx_.alloc(host_, specs[kHostShard]));
    sink_ = std::make_unique<FlatGrads>(&ctx_.layout, full_.ptr<float>(), ctx_.part.padded_unit_offsets());
    return ctx_.device.synchronize(ctx_.stream);
  }

  GradSink& sink() override { return *sink_; }
  void zero() override { ctx_.device.memset(ctx_.stream, full_.data(), 0, full_.bytes()); }

  absl::Status reduce() override {
    const Partition& p = ctx_.part;
    if (!scatter_) {
      ZEROD_RETURN_IF_ERROR(all_reduce(ctx_.comm, full_.data(), p.padded_numel(), CommType::kF32, ReduceOp::kSum));
    } else {
      std::vector<WorkPtr> works;
      for (int u = 0; u < p.num_units(); ++u) {
        works.push_back(ctx_.comm.reduce_scatter(full_.ptr<float>() + p.padded_offset(u),
                                                 shard_.ptr<float>() + p.shard_offset(u), p.chunk(u), CommType::kF32,
                                                 ReduceOp::kSum));
      }
      ZEROD_RETURN_IF_ERROR(wait_all(works));
    }
    if (!host_.data()) return absl::OkStatus();
    ctx_.device.copy(ctx_.stream, host_.data(), reduced().data(), host_.bytes());
    return ctx_.device.synchronize(ctx_.stream);
  }

  bool on_host() const override { return host_.data() != nullptr; }
  // Without scatter the partition is a world of one, so the shard layout is
  // the padded one.
  const float* owned(const ShardSegment& s) override { return optimizers().ptr<float>() + s.shard_offset; }
  absl::StatusOr<const float*> acquire(int u) override { return optimizers().ptr<float>() + ctx_.part.shard_offset(u); }

 private:
  const Buffer& reduced() const { return scatter_ ? shard_ : full_; }
  // The reduced shard where the optimizer reads it.
  const Buffer& optimizers() const { return host_.data() ? host_ : reduced(); }

  const bool scatter_;
  Buffer full_, shard_, host_;
  std::unique_ptr<FlatGrads> sink_;
};

// Stages 2 and 3: each unit's reduced chunk added to the shard on the stream.
class ShardedGrads : public GradStore, public ScatterGrads::Target {
 public:
  explicit ShardedGrads(ZeroContext& ctx) : GradStore(ctx), sink_(ctx, *this) {}

  // The shard, then its ScatterGrads's.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z) {
    std::vector<BufferSpec> specs = {
        {"gradient shard", Category::kGrads, static_cast<uint64_t>(shape.part.shard_numel() * 4)}};
    for (BufferSpec& b : ScatterGrads::buffers(shape, z)) specs.push_back(std::move(b));
    return specs;
  }

  absl::Status allocate(const ZeroConfig& z, const MicroBatchSums& sums) {
    rounded_ = sums.rounded;
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, buffers(ctx_, z)[0]));
    return sink_.allocate(z);
  }

  GradSink& sink() override { return sink_; }
  void zero() override { ctx_.device.memset(ctx_.stream, shard_.data(), 0, shard_.bytes()); }
  absl::Status reduce() override { return sink_.flush(); }
  const float* owned(const ShardSegment& s) override { return shard_.ptr<float>() + s.shard_offset; }
  absl::StatusOr<const float*> acquire(int u) override { return shard_.ptr<float>() + ctx_.part.shard_offset(u); }

  absl::Status add(int u, const Buffer& recv) override {
    // Rounded as an offloaded store sends it (HostAdds), in place: recv is
    // written afresh before its next use.
    ctx_.kernels.round_to(ctx_.stream, rounded_, recv.ptr<float>(), ctx_.part.chunk(u));
    ctx_.kernels.add(ctx_.stream, shard_.ptr<float>() + ctx_.part.shard_offset(u), recv.ptr<float>(),
                     ctx_.part.chunk(u));
    return absl::OkStatus();
  }

 private:
  DType rounded_ = DType::kF32;
  Buffer shard_;
  ScatterGrads sink_;  // after shard_: its last adds run before the shard goes
};

// Stages 2 and 3 with offload_optimizer cpu: the shard in host memory,
// where the optimizer reads it.
class HostGrads : public GradStore {
 public:
  explicit HostGrads(ZeroContext& ctx)
      : GradStore(ctx),
        adds_(
            ctx,
            [this](int u, int64_t start, absl::Span<const void* const> srcs, DType type, int64_t n,
                   bool fresh) -> absl::StatusOr<const float*> {
              float* unit = shard_.host<float>() + ctx_.part.shard_offset(u);
              accumulate_f32(type, srcs, unit + start, n, fresh);
              return unit;
            },
            {}, [this](int u) { return shard_.host<float>() + ctx_.part.shard_offset(u); }) {}

  // The shard, then its HostAdds's.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z, const MicroBatchSums& sums,
                                         Tier tier) {
    std::vector<BufferSpec> specs = {
        {"gradient shard on the host", Category::kGrads, static_cast<uint64_t>(shape.part.shard_numel() * 4), 1, tier}};
    for (BufferSpec& b : HostAdds::buffers(shape, z, sums, tier, /*lands=*/true)) specs.push_back(std::move(b));
    return specs;
  }

  absl::Status allocate(const ZeroConfig& z, const MicroBatchSums& sums, Tier tier) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, buffers(ctx_, z, sums, tier)[0]));
    return adds_.allocate(z, sums, tier);
  }

  GradSink& sink() override { return adds_.sink(); }
  void zero() override { adds_.zero(); }
  absl::Status reduce() override { return adds_.reduce(); }
  bool on_host() const override { return true; }
  const float* owned(const ShardSegment& s) override { return shard_.host<float>() + s.shard_offset; }
  absl::StatusOr<const float*> acquire(int u) override { return shard_.host<float>() + ctx_.part.shard_offset(u); }
  void after_adds(int count, AfterAdds then, bool) override { adds_.after_adds(count, std::move(then)); }
  void after_device_adds(AfterAdds then) override { adds_.after_device_adds(std::move(then)); }

 private:
  Buffer shard_;
  HostAdds adds_;  // after the shard: its thread's tasks end before the shard goes
};

// Stages 2 and 3 with offload_optimizer nvme: the shard in a file. A unit's
// first chunk of a step is written, later ones added to what is stored
// (read while the reduction runs); both by the host thread, which owns the
// store until reduce() has waited for it.
class FileGrads : public GradStore {
 public:
  explicit FileGrads(ZeroContext& ctx)
      : GradStore(ctx),
        adds_(
            ctx,
            [this](int u, int64_t start, absl::Span<const void* const> srcs, DType type, int64_t n,
                   bool fresh) -> absl::StatusOr<const float*> {
              for (size_t i = 0; i < srcs.size(); ++i) {
                ZEROD_RETURN_IF_ERROR(
                    store_->add(ctx_.part.shard_offset(u) + start, srcs[i], type, n, fresh && i == 0));
              }
              return static_cast<const float*>(store_->unwritten(u));
            },
            [this](int u) { return store_->fetch(u); }) {}

  // The store's, then its HostAdds's.
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z, const MicroBatchSums& sums,
                                         const ShardStoreSettings& settings) {
    const Partition& p = shape.part;
    std::vector<BufferSpec> specs = ShardStore::buffers(p.chunks(), p.chunk(1), DType::kF32, settings);
    for (BufferSpec& b : HostAdds::buffers(shape, z, sums, settings.host_tier, /*lands=*/false)) {
      specs.push_back(std::move(b));
    }
    return specs;
  }

  absl::Status allocate(const ZeroConfig& z, const MicroBatchSums& sums, ShardStoreSettings settings) {
    const Partition& p = ctx_.part;
    const Tier tier = settings.host_tier;
    ZEROD_ASSIGN_OR_RETURN(store_, ShardStore::create(p.chunks(), p.chunk(1), DType::kF32, std::move(settings)));
    return adds_.allocate(z, sums, tier);
  }

  GradSink& sink() override { return adds_.sink(); }
  void zero() override { adds_.zero(); }
  absl::Status reduce() override {
    absl::Status s = adds_.reduce();
    s.Update(store_->flush());
    return s;
  }
  bool in_memory() const override { return false; }
  bool on_host() const override { return true; }
  const float* owned(const ShardSegment&) override { return nullptr; }
  // Gradients used as each unit is completed are not written, unless kept.
  void after_adds(int count, AfterAdds then, bool keep) override {
    if (then && !keep) {
      then = [this, then = std::move(then)](int u, const float* grads) {
        ZEROD_RETURN_IF_ERROR(then(u, grads));
        store_->discard(u);
        return absl::OkStatus();
      };
    }
    adds_.after_adds(count, std::move(then));
  }

  // The next unit is read ahead.
  absl::StatusOr<const float*> acquire(int u) override {
    ZEROD_ASSIGN_OR_RETURN(void* stored, store_->acquire(u));
    if (u + 1 < ctx_.part.num_units()) ZEROD_RETURN_IF_ERROR(store_->fetch(u + 1));
    return static_cast<const float*>(stored);
  }
  // The window is read again by the next fetch: what reads it ends first.
  absl::Status release(int u) override {
    ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
    store_->release(u);
    return absl::OkStatus();
  }
  absl::Status read(const ShardSegment& s, int64_t start, int64_t n, float* dst) override {
    if (held_ != s.unit) {
      if (held_ >= 0) ZEROD_RETURN_IF_ERROR(release(held_));
      held_ = s.unit;
      ZEROD_ASSIGN_OR_RETURN(held_data_, acquire(held_));
    }
    std::memcpy(dst, held_data_ + (s.shard_offset - ctx_.part.shard_offset(s.unit)) + start, n * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status drop() override {
    held_ = -1;
    return store_->drop();
  }

 private:
  std::unique_ptr<ShardStore> store_;
  int held_ = -1;  // the unit read() holds
  const float* held_data_ = nullptr;
  HostAdds adds_;  // after the store: its thread's tasks end before the store goes
};

}  // namespace

std::vector<BufferSpec> grad_store_buffers(const ZeroShape& shape, const ZeroConfig& z, const GradStoreChoice& c) {
  switch (c.kind) {
    case GradStoreChoice::kFull:
      return FullGrads::buffers(shape, c.scatter, c.host_tier);
    case GradStoreChoice::kSharded:
      return ShardedGrads::buffers(shape, z);
    case GradStoreChoice::kHost:
      return HostGrads::buffers(shape, z, c.sums, c.tier);
    case GradStoreChoice::kFile:
      return FileGrads::buffers(shape, z, c.sums, c.file);
  }
  return {};
}

absl::StatusOr<std::unique_ptr<GradStore>> create_grad_store(ZeroContext& ctx, const ZeroConfig& z, GradStoreChoice c) {
  switch (c.kind) {
    case GradStoreChoice::kFull:
      return allocated<GradStore>(std::make_unique<FullGrads>(ctx, c.scatter), c.host_tier);
    case GradStoreChoice::kSharded:
      return allocated<GradStore>(std::make_unique<ShardedGrads>(ctx), z, c.sums);
    case GradStoreChoice::kHost:
      return allocated<GradStore>(std::make_unique<HostGrads>(ctx), z, c.sums, c.tier);
    case GradStoreChoice::kFile:
      return allocated<GradStore>(std::make_unique<FileGrads>(ctx), z, c.sums, std::move(c.file));
  }
  return absl::InternalError("unknown gradient store");
}

}  // namespace zerod
