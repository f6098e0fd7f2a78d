#include "shard/grad_store.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/task_thread.h"
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

  absl::Status allocate(std::optional<Tier> host_tier) {
    const Partition& p = ctx_.part;
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(full_, p.padded_numel() * 4, Category::kGrads));
    if (scatter_) ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, p.shard_numel() * 4, Category::kGrads));
    if (host_tier) {
      ZEROD_ASSIGN_OR_RETURN(host_, ctx_.device.allocate(p.shard_numel() * 4, Category::kGrads, *host_tier));
    }
    sink_ = std::make_unique<FlatGrads>(&ctx_.layout, full_.ptr<float>(), p.padded_unit_offsets());
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
  absl::StatusOr<const float*> acquire(int u) override {
    return optimizers().ptr<float>() + ctx_.part.shard_offset(u);
  }

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

  absl::Status allocate(const ZeroConfig& z) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(shard_, ctx_.part.shard_numel() * 4, Category::kGrads));
    return sink_.allocate(z);
  }

  GradSink& sink() override { return sink_; }
  void zero() override { ctx_.device.memset(ctx_.stream, shard_.data(), 0, shard_.bytes()); }
  absl::Status reduce() override { return sink_.flush(); }
  const float* owned(const ShardSegment& s) override { return shard_.ptr<float>() + s.shard_offset; }
  absl::StatusOr<const float*> acquire(int u) override { return shard_.ptr<float>() + ctx_.part.shard_offset(u); }

  absl::Status add(int u, const Buffer& recv) override {
    ctx_.kernels.add(ctx_.stream, shard_.ptr<float>() + ctx_.part.shard_offset(u), recv.ptr<float>(),
                     ctx_.part.chunk(u));
    return absl::OkStatus();
  }

 private:
  Buffer shard_;
  ScatterGrads sink_;  // after shard_: its last adds run before the shard goes
};

// Stages 2 and 3 with the optimizer on the host: the sink's reduced chunks
// are copied, in parts of at most kPart elements, to one of two host
// buffers on the copy stream (beside the backward still running) and added
// where the store keeps them by a host thread, while the caller goes on.
// The buffers are bounded whatever the model's size.
class HostAdds : public ScatterGrads::Target {
 public:
  // 2 MiB: large enough for a copy to stream at the link's bandwidth,
  // small enough that the two buffers are little beside the windows.
  static constexpr int64_t kPart = int64_t{1} << 19;
  // Adds elements [start, start + n) of unit u's reduced chunk, `src`,
  // where the store keeps the unit, onto zeros when `fresh` (its first chunk
  // of the step); returns the unit's sum so far, in host memory until the
  // next add.
  using Add =
      std::function<absl::StatusOr<const float*>(int u, int64_t start, const float* src, int64_t n, bool fresh)>;

  // Before a reduction into a unit that adds to an earlier chunk of it,
  // `reread(u)` runs on the host thread (a store in a file reads it ahead).
  using Reread = std::function<absl::Status(int u)>;

  HostAdds(ZeroContext& ctx, Add add, Reread reread = {})
      : ctx_(ctx),
        add_(std::move(add)),
        reread_(std::move(reread)),
        thread_([&ctx] { return ctx.device.bind_thread(); }),
        sink_(ctx, *this) {}

  // What allocate() allocates on plan's device.
  static void plan(const ZeroShape& shape, const ZeroConfig& z, Tier tier, MemoryPlan& plan) {
    plan.add("reduced gradients on their way to the host", tier, Category::kOffload, buffer_bytes(shape), Phase::kBuild,
             true, kBuffers);
    ScatterGrads::plan(shape, z, plan);
  }

  GradSink& sink() { return sink_; }
  absl::Status allocate(const ZeroConfig& z, Tier tier) {
    for (Arrived& a : arrived_) {
      ZEROD_ASSIGN_OR_RETURN(a.buf, ctx_.device.allocate(buffer_bytes(ctx_), Category::kOffload, tier));
    }
    ZEROD_ASSIGN_OR_RETURN(copies_, ctx_.device.create_stream());
    zero();
    return sink_.allocate(z);
  }

  void zero() { added_.assign(ctx_.part.num_units(), 0); }
  // Every reduction given to the host thread, and its work done.
  absl::Status reduce() {
    absl::Status s = sink_.flush();
    s.Update(thread_.drain());
    return s;
  }
  void after_adds(int count, GradStore::AfterAdds then) {
    then_count_ = count;
    then_ = std::move(then);
  }
  absl::Status started(int u) override {
    if (reread_ && added_[u] > 0) thread_.submit([this, u] { return reread_(u); });
    return absl::OkStatus();
  }
  // The copies are waited for here, since recv is reused once this returns;
  // the adds (and what follows the last) are the host thread's.
  absl::Status add(int u, const Buffer& recv) override {
    const int64_t chunk = ctx_.part.chunk(u);
    const int count = ++added_[u];
    for (int64_t start = 0; start < chunk; start += kPart) {
      const int64_t n = std::min(kPart, chunk - start);
      Arrived& a = arrived_[next_++ % kBuffers];
      if (a.added.valid()) ZEROD_RETURN_IF_ERROR(a.added.get());  // the host thread is done with it
      ctx_.device.copy(*copies_, a.buf.data(), recv.ptr<float>() + start, n * sizeof(float));
      ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(*copies_));
      GradStore::AfterAdds then = count == then_count_ && start + n == chunk ? then_ : nullptr;
      a.added =
          thread_.submit([this, u, start, n, src = a.buf.host<float>(), fresh = count == 1, then = std::move(then)] {
            ZEROD_ASSIGN_OR_RETURN(const float* sum, add_(u, start, src, n, fresh));
            return then ? then(u, sum) : absl::OkStatus();
          });
    }
    return absl::OkStatus();
  }

 private:
  struct Arrived {
    Buffer buf;                              // one reduced chunk, copied from the device
    std::shared_future<absl::Status> added;  // the host thread's add from it
  };
  static constexpr int kBuffers = 2;
  // A part of the largest chunk.
  static uint64_t buffer_bytes(const ZeroShape& shape) {
    int64_t largest = 0;
    for (int64_t c : shape.part.chunks()) largest = std::max(largest, c);
    return std::min(largest, kPart) * 4;
  }
  ZeroContext& ctx_;
  const Add add_;
  const Reread reread_;
  Arrived arrived_[kBuffers];
  int64_t next_ = 0;
  std::unique_ptr<Stream> copies_;
  std::vector<int> added_;  // per unit
  int then_count_ = 0;
  GradStore::AfterAdds then_;
  TaskThread thread_;  // after the buffers: its tasks end before they go
  ScatterGrads sink_;  // after the thread: its last adds are submitted while it runs
};

// Stages 2 and 3 with offload_optimizer cpu: the shard in host memory,
// where the optimizer reads it.
class HostGrads : public GradStore {
 public:
  explicit HostGrads(ZeroContext& ctx)
      : GradStore(ctx),
        adds_(ctx,
              [this](int u, int64_t start, const float* src, int64_t n, bool fresh) -> absl::StatusOr<const float*> {
                Stream& host = ctx_.host.compute_stream();
                float* unit = shard_.host<float>() + ctx_.part.shard_offset(u);
                if (fresh) ctx_.host.memset(host, unit + start, 0, n * sizeof(float));
                ctx_.host_kernels.add(host, unit + start, src, n);
                return unit;
              }) {}

  absl::Status allocate(const ZeroConfig& z, Tier tier) {
    ZEROD_ASSIGN_OR_RETURN(shard_, ctx_.device.allocate(ctx_.part.shard_numel() * 4, Category::kGrads, tier));
    return adds_.allocate(z, tier);
  }

  GradSink& sink() override { return adds_.sink(); }
  void zero() override { adds_.zero(); }
  absl::Status reduce() override { return adds_.reduce(); }
  bool on_host() const override { return true; }
  const float* owned(const ShardSegment& s) override { return shard_.host<float>() + s.shard_offset; }
  absl::StatusOr<const float*> acquire(int u) override { return shard_.host<float>() + ctx_.part.shard_offset(u); }
  void after_adds(int count, AfterAdds then, bool) override { adds_.after_adds(count, std::move(then)); }

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
            [this](int u, int64_t start, const float* src, int64_t n, bool fresh) -> absl::StatusOr<const float*> {
              ZEROD_RETURN_IF_ERROR(store_->add(ctx_.part.shard_offset(u) + start, src, n, fresh));
              return static_cast<const float*>(store_->unwritten(u));
            },
            [this](int u) { return store_->fetch(u); }) {}

  absl::Status allocate(const ZeroConfig& z, ShardStoreSettings settings) {
    const Partition& p = ctx_.part;
    const Tier tier = settings.host_tier;
    ZEROD_ASSIGN_OR_RETURN(store_, ShardStore::create(p.chunks(), p.chunk(1), DType::kF32, std::move(settings)));
    return adds_.allocate(z, tier);
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

void plan_full_grads(const ZeroShape& shape, bool scatter, std::optional<Tier> host_tier, MemoryPlan& plan) {
  const Partition& p = shape.part;
  plan.add_device("gradients", Category::kGrads, p.padded_numel() * 4);
  if (scatter) plan.add_device("reduced gradient shard", Category::kGrads, p.shard_numel() * 4);
  if (host_tier) plan.add("reduced gradient shard on the host", *host_tier, Category::kGrads, p.shard_numel() * 4);
}

void plan_sharded_grads(const ZeroShape& shape, const ZeroConfig& z, MemoryPlan& plan) {
  plan.add_device("gradient shard", Category::kGrads, shape.part.shard_numel() * 4);
  ScatterGrads::plan(shape, z, plan);
}

void plan_host_grads(const ZeroShape& shape, const ZeroConfig& z, Tier tier, MemoryPlan& plan) {
  plan.add("gradient shard on the host", tier, Category::kGrads, shape.part.shard_numel() * 4);
  HostAdds::plan(shape, z, tier, plan);
}

void plan_file_grads(const ZeroShape& shape, const ZeroConfig& z, const ShardStoreSettings& settings,
                     MemoryPlan& plan) {
  const Partition& p = shape.part;
  ShardStore::plan(p.chunks(), p.chunk(1), DType::kF32, settings, plan);
  HostAdds::plan(shape, z, settings.host_tier, plan);
}

absl::StatusOr<std::unique_ptr<GradStore>> full_grads(ZeroContext& ctx, bool scatter, std::optional<Tier> host_tier) {
  return allocated<GradStore>(std::make_unique<FullGrads>(ctx, scatter), host_tier);
}

absl::StatusOr<std::unique_ptr<GradStore>> host_grads(ZeroContext& ctx, const ZeroConfig& z, Tier tier) {
  return allocated<GradStore>(std::make_unique<HostGrads>(ctx), z, tier);
}

absl::StatusOr<std::unique_ptr<GradStore>> sharded_grads(ZeroContext& ctx, const ZeroConfig& z) {
  return allocated<GradStore>(std::make_unique<ShardedGrads>(ctx), z);
}

absl::StatusOr<std::unique_ptr<GradStore>> file_grads(ZeroContext& ctx, const ZeroConfig& z,
                                                      ShardStoreSettings settings) {
  return allocated<GradStore>(std::make_unique<FileGrads>(ctx), z, std::move(settings));
}

}  // namespace zerod
