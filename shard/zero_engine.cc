#include "shard/zero_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include "absl/strings/str_cat.h"
#include "offload/swap_dir.h"
#include "runtime/core/gpu_memory.h"

namespace zerod {
namespace {

CommType comm_type(DType t) {
  switch (t) {
    case DType::kBF16: return CommType::kBF16;
    case DType::kF16: return CommType::kF16;
    default: return CommType::kF32;
  }
}


// Where offload buffers live: pinned host memory when a GPU will copy from
// them, plain host memory otherwise.
Tier buffer_tier(const OffloadConfig& c) {
  return c.pin_memory && cuda_device_count() > 0 ? Tier::kPinned : Tier::kHost;
}

IoFaultHook& swap_fault_hook() {
  static IoFaultHook hook;
  return hook;
}

// Waits for `w`, adding the time blocked to *seconds.
absl::Status timed_wait(Work& w, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = w.wait();
  *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

// Waits for every work item, returning the first failure.
absl::Status wait_all(std::vector<WorkPtr>& works) {
  absl::Status first;
  for (WorkPtr& w : works) first.Update(w->wait());
  works.clear();
  return first;
}

}  // namespace

// Stage 3's parameters: units all-gathered from the shards on demand. Layer
// units go through one slot, or two when prefetching (the layer in use and
// the next); when layers are below the persistence threshold every layer has
// its own slot, kept between passes until the next update.
class ZeroEngine::ShardedWeights : public WeightSource {
 public:
  explicit ShardedWeights(ZeroEngine* e) : e_(e) {}

  absl::Status allocate() {
    const GptLayout& L = *e_->layout_;
    const Partition& p = e_->part_;
    const ZeroConfig& z = e_->cfg_.zero;
    const int n = p.world_size();
    const int64_t ds = dtype_size(e_->dtype_);
    persistent_layers_ = L.unit_numel(1) < z.stage3_param_persistence_threshold;
    persistent_globals_ = L.unit_numel(0) + L.unit_numel(L.final_unit()) < z.stage3_param_persistence_threshold;
    prefetch_ = z.stage3_prefetch_bucket_size > 0;
    const int slots = persistent_layers_ ? L.config().n_layer : (prefetch_ ? 2 : 1);
    layers_.resize(slots);
    for (Slot& s : layers_) ZEROD_RETURN_IF_ERROR(allocate_slot(s, p.chunk(1) * n * ds));
    ZEROD_RETURN_IF_ERROR(allocate_slot(emb_, p.chunk(0) * n * ds));
    ZEROD_RETURN_IF_ERROR(allocate_slot(fin_, p.chunk(L.final_unit()) * n * ds));
    if (e_->dtype_ != DType::kF32) {
      ZEROD_RETURN_IF_ERROR(e_->alloc(layer_staging_, L.unit_numel(1) * 4, Category::kWorkspace));
      ZEROD_RETURN_IF_ERROR(
          e_->alloc(global_staging_, (L.unit_numel(0) + L.unit_numel(L.final_unit())) * 4, Category::kWorkspace));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<GlobalWeights> globals() override {
    const GptLayout& L = *e_->layout_;
    ZEROD_ASSIGN_OR_RETURN(const bool fresh_emb, acquire(emb_, 0));
    ZEROD_ASSIGN_OR_RETURN(const bool fresh_fin, acquire(fin_, L.final_unit()));
    if (fresh_emb || fresh_fin || e_->dtype_ == DType::kF32) {
      globals_ = global_weight_views(e_->converter(), L, e_->dtype_, emb_.buf.data(), fin_.buf.data(),
                                     global_staging_.ptr<float>());
    }
    return globals_;
  }

  absl::StatusOr<LayerWeights> layer(int l) override {
    const int u = GptLayout::layer_unit(l);
    // The model has enqueued all its work on the layer before.
    if (current_) e_->device_.record(e_->stream_, *current_->used);
    Slot* s = find(u);
    if (!s) {
      s = &slot_for(u);
      ZEROD_RETURN_IF_ERROR(start(*s, u));
    }
    ZEROD_RETURN_IF_ERROR(finish(*s));
    current_ = s;
    current_layer_ = l;
    return layer_weight_views(e_->converter(), *e_->layout_, e_->dtype_, s->buf.data(), layer_staging_.ptr<float>());
  }

  absl::Status prefetch(int l) override {
    const int u = GptLayout::layer_unit(l);
    if (!prefetch_ || find(u)) return absl::OkStatus();
    ZEROD_RETURN_IF_ERROR(start(slot_for(u), u));
    // An offloaded shard is read one layer further ahead, in the direction
    // the pass is going, so that its read overlaps a layer's compute.
    const int next = l + (l - current_layer_);
    if (e_->param_store_ && next != l && next >= 0 && next < e_->layout_->config().n_layer) {
      return e_->param_store_->fetch(GptLayout::layer_unit(next));
    }
    return absl::OkStatus();
  }

  // Every gather in flight is waited for, also after one fails.
  absl::Status end_pass() override {
    absl::Status first;
    for (Slot* s : all_slots()) {
      first.Update(finish(*s));
      e_->device_.record(e_->stream_, *s->used);
    }
    if (!persistent_layers_) release_layers();
    if (!persistent_globals_) emb_.unit = fin_.unit = -1;
    current_ = nullptr;
    current_layer_ = -1;
    if (e_->param_store_) first.Update(e_->param_store_->drop());
    return first;
  }

  // The shards changed: nothing gathered is current any more.
  absl::Status invalidate() {
    absl::Status s = end_pass();
    release_layers();
    emb_.unit = fin_.unit = -1;
    return s;
  }

 private:
  struct Slot {
    Buffer buf;
    int unit = -1;         // the unit held or being gathered
    WorkPtr work;          // in flight
    bool fetched = false;  // gathering from the parameter store's window
    // Recorded on the compute stream after the last kernel that reads the
    // slot: a gather must not overwrite it before then.
    std::unique_ptr<Event> used;
  };

  absl::Status allocate_slot(Slot& s, int64_t bytes) {
    ZEROD_ASSIGN_OR_RETURN(s.used, e_->device_.create_event());
    return e_->alloc(s.buf, bytes, Category::kParams);
  }
  std::vector<Slot*> all_slots() {
    std::vector<Slot*> all = {&emb_, &fin_};
    for (Slot& s : layers_) all.push_back(&s);
    return all;
  }

  Slot* find(int u) {
    for (Slot& s : layers_) {
      if (s.unit == u) return &s;
    }
    return nullptr;
  }
  // Where unit u goes: with persistent layers each has its own slot;
  // otherwise any slot but the one in use.
  Slot& slot_for(int u) {
    if (persistent_layers_) return layers_[u - 1];
    for (Slot& s : layers_) {
      if (&s != current_) return s;
    }
    return layers_[0];
  }
  void release_layers() {
    for (Slot& s : layers_) s.unit = -1;
  }

  // Starts gathering unit u into the slot. A rank that cannot read its
  // chunk still takes part (sending what the slot holds, so that no peer
  // waits on it) and returns the error.
  absl::Status start(Slot& slot, int u) {
    ZEROD_RETURN_IF_ERROR(finish(slot));
    ZEROD_RETURN_IF_ERROR(e_->device_.synchronize(*slot.used));
    const Partition& p = e_->part_;
    const int64_t ds = dtype_size(e_->dtype_);
    const void* shard = e_->param_shard_.ptr<char>() + p.shard_offset(u) * ds;
    absl::Status read;
    if (e_->param_store_) {
      absl::StatusOr<void*> fetched = e_->param_store_->acquire(u);
      slot.fetched = fetched.ok();
      shard = fetched.ok() ? *fetched : slot.buf.ptr<char>() + e_->owner_ * p.chunk(u) * ds;
      read = fetched.status();
    }
    slot.unit = u;
    slot.work = e_->comm_->all_gather(shard, slot.buf.data(), p.chunk(u), comm_type(e_->dtype_));
    return read;
  }
  absl::Status finish(Slot& s) {
    absl::Status gathered;
    if (s.work) gathered = timed_wait(*std::exchange(s.work, nullptr), &e_->pass_wait_s_);
    if (std::exchange(s.fetched, false)) e_->param_store_->release(s.unit);
    if (!gathered.ok()) s.unit = -1;  // holds nothing usable
    return gathered;
  }
  // Gathers unit u into s unless it is there; true when it was gathered now.
  absl::StatusOr<bool> acquire(Slot& s, int u) {
    if (s.unit == u) return false;
    ZEROD_RETURN_IF_ERROR(start(s, u));
    ZEROD_RETURN_IF_ERROR(finish(s));
    return true;
  }

  ZeroEngine* e_;
  bool persistent_layers_ = false, persistent_globals_ = false, prefetch_ = true;
  std::vector<Slot> layers_;
  Slot emb_, fin_;
  Slot* current_ = nullptr;
  int current_layer_ = -1;  // the layer last handed out in this pass
  Buffer layer_staging_, global_staging_;
  GlobalWeights globals_{};
};

// Stages 2 and 3: each unit's gradients are written to a staging buffer and
// reduce-scattered as soon as backward is done with them; the rank adds its
// reduced chunk to its gradient shard. Layer staging buffers are a small
// pool: with overlap_comm, as many as reduce_bucket_size elements allow
// (at least two, so one layer's backward runs while the last one's
// reduce-scatter is in flight); without, one, waited on at once.
class ZeroEngine::ShardedGrads : public GradSink {
 public:
  explicit ShardedGrads(ZeroEngine* e) : e_(e) {}

  absl::Status allocate() {
    const GptLayout& L = *e_->layout_;
    const Partition& p = e_->part_;
    const ZeroConfig& z = e_->cfg_.zero;
    const int n = p.world_size();
    overlap_ = z.overlap_comm;
    const int64_t fit = z.reduce_bucket_size / std::max<int64_t>(1, L.unit_numel(1));
    const int slots = overlap_ ? static_cast<int>(std::clamp<int64_t>(fit, 2, std::max(2, L.config().n_layer))) : 1;
    layers_.resize(slots);
    for (Slot& s : layers_) ZEROD_RETURN_IF_ERROR(allocate_slot(s, p.chunk(1) * n, p.chunk(1)));
    ZEROD_RETURN_IF_ERROR(allocate_slot(emb_, p.chunk(0) * n, p.chunk(0)));
    ZEROD_RETURN_IF_ERROR(allocate_slot(fin_, p.chunk(L.final_unit()) * n, p.chunk(L.final_unit())));
    return absl::OkStatus();
  }

  absl::StatusOr<GlobalGrads> globals() override {
    ZEROD_RETURN_IF_ERROR(fill(emb_, 0));
    ZEROD_RETURN_IF_ERROR(fill(fin_, e_->layout_->final_unit()));
    return global_grad_views(*e_->layout_, emb_.staging.ptr<float>(), fin_.staging.ptr<float>());
  }

  absl::StatusOr<LayerGrads> layer(int l) override {
    Slot* s = nullptr;
    for (Slot& c : layers_) {
      if (c.unit < 0) s = &c;
    }
    if (!s) {
      s = in_flight_.front();
      ZEROD_RETURN_IF_ERROR(complete(*s));
    }
    ZEROD_RETURN_IF_ERROR(fill(*s, GptLayout::layer_unit(l)));
    return layer_grad_views(*e_->layout_, s->staging.ptr<float>());
  }

  absl::Status layer_done(int l) override {
    for (Slot& s : layers_) {
      if (s.unit == GptLayout::layer_unit(l) && !s.work) return launch(s);
    }
    return absl::OkStatus();
  }

  absl::Status end_backward() override {
    ZEROD_RETURN_IF_ERROR(launch(emb_));
    return launch(fin_);
  }

  // Every reduce-scatter completed and added to the shard (all of them
  // waited for, also after one fails).
  absl::Status flush() {
    absl::Status first;
    while (!in_flight_.empty()) first.Update(complete(*in_flight_.front()));
    if (e_->grad_store_) first.Update(e_->grad_store_->flush());
    return first;
  }

 private:
  struct Slot {
    Buffer staging, recv;
    int unit = -1;  // filling or in flight
    WorkPtr work;
  };

  absl::Status allocate_slot(Slot& s, int64_t padded, int64_t chunk) {
    ZEROD_RETURN_IF_ERROR(e_->alloc(s.staging, padded * 4, Category::kComm));
    return e_->alloc(s.recv, chunk * 4, Category::kComm);
  }
  absl::Status fill(Slot& s, int u) {
    if (s.work) ZEROD_RETURN_IF_ERROR(complete(s));
    s.unit = u;
    e_->device_.memset(e_->stream_, s.staging.data(), 0, s.staging.bytes());
    return absl::OkStatus();
  }
  absl::Status launch(Slot& s) {
    // The reduction reads what backward wrote to the staging, and writes the
    // recv buffer the last add (enqueued before that) reads.
    ZEROD_RETURN_IF_ERROR(e_->device_.synchronize(e_->stream_));
    const int64_t chunk = e_->part_.chunk(s.unit);
    s.work = e_->comm_->reduce_scatter(s.staging.data(), s.recv.data(), chunk, CommType::kF32, ReduceOp::kSum);
    in_flight_.push_back(&s);
    // Gradients being accumulated in a file: the stored chunk is read while the reduction runs.
    if (e_->grad_store_ && !e_->grads_fresh_[s.unit]) ZEROD_RETURN_IF_ERROR(e_->grad_store_->fetch(s.unit));
    return overlap_ ? absl::OkStatus() : complete(s);
  }
  // Waits for s's reduction and adds the rank's chunk to its shard; the slot
  // is free again either way.
  absl::Status complete(Slot& s) {
    const int u = std::exchange(s.unit, -1);
    in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), &s));
    ZEROD_RETURN_IF_ERROR(timed_wait(*std::exchange(s.work, nullptr), &e_->pass_wait_s_));
    const int64_t chunk = e_->part_.chunk(u), offset = e_->part_.shard_offset(u);
    if (e_->grad_store_) {
      ZEROD_RETURN_IF_ERROR(e_->grad_store_->add(offset, s.recv.host<float>(), chunk, e_->grads_fresh_[u]));
      e_->grads_fresh_[u] = false;
    } else {
      e_->kernels_.add(e_->stream_, e_->grad_shard_.ptr<float>() + offset, s.recv.ptr<float>(), chunk);
    }
    return absl::OkStatus();
  }

  ZeroEngine* e_;
  bool overlap_ = true;
  std::vector<Slot> layers_;
  Slot emb_, fin_;
  std::deque<Slot*> in_flight_;  // launch order
};

ZeroEngine::ZeroEngine(const GptLayout* layout, const JobConfig& cfg, Communicator* comm, Device& device,
                       Kernels& kernels)
    : layout_(layout),
      cfg_(cfg),
      comm_(comm),
      device_(device),
      kernels_(kernels),
      stream_(device.compute_stream()),
      stage_(cfg.zero.stage),
      dtype_(cfg.precision),
      params_offloaded_(stage_ == 3 && cfg.zero.offload_param.device != OffloadDevice::kNone),
      grads_offloaded_(stage_ >= 2 && cfg.zero.offload_optimizer.device == OffloadDevice::kNvme),
      separate_master_(dtype_ != DType::kF32 || params_offloaded_),
      part_(*layout, stage_ == 0 ? 1 : comm->world_size()),
      owner_(stage_ == 0 ? 0 : comm->rank()) {}

ZeroEngine::~ZeroEngine() {
  // A pass that stopped at a failure may have left collectives in flight
  // into the slots, and work queued on the stream: both end before the
  // buffers go.
  if (sharded_weights_) sharded_weights_->end_pass().IgnoreError();
  if (sharded_grads_) sharded_grads_->flush().IgnoreError();
  device_.synchronize(stream_).IgnoreError();
}

absl::StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::create(const GptLayout* layout, const JobConfig& cfg,
                                                               Communicator* comm, Device& device, Kernels& kernels) {
  std::unique_ptr<ZeroEngine> e(new ZeroEngine(layout, cfg, comm, device, kernels));
  ZEROD_RETURN_IF_ERROR(e->build());
  return e;
}

absl::Status ZeroEngine::build() {
  owned_ = zerod::owned_segments(*layout_, part_, owner_);
  // Imported weights are checked whole before anything is allocated.
  if (cfg_.init_from) {
    ZEROD_ASSIGN_OR_RETURN(init_from_, Gpt2Weights::open(*cfg_.init_from, *layout_));
  }
  const OffloadConfig& off = cfg_.zero.offload_optimizer;
  const OffloadConfig& off_param = cfg_.zero.offload_param;
  const bool swapped = off.device == OffloadDevice::kNvme;
  const bool params_on_nvme = params_offloaded_ && off_param.device == OffloadDevice::kNvme;
  const std::vector<ParamPiece> shape = piece_shapes(owned_);  // before anything is allocated
  std::vector<int64_t> chunks;
  for (int u = 0; u < part_.num_units(); ++u) chunks.push_back(part_.chunk(u));
  // The disks are checked before anything is allocated; two files in one
  // directory need the space of both.
  {
    const uint64_t states = swapped ? SwappedOptimizer::file_bytes(cfg_.optimizer, shape, dtype_, separate_master_,
                                                                   cfg_.zero.sub_group_size)
                                    : 0;
    const uint64_t grads = grads_offloaded_ ? ShardStore::file_bytes(chunks, DType::kF32) : 0;
    const uint64_t params = params_on_nvme ? ShardStore::file_bytes(chunks, dtype_) : 0;
    const bool one_dir = swapped && params_on_nvme && *off.nvme_path == *off_param.nvme_path;
    if (swapped) {
      ZEROD_RETURN_IF_ERROR(check_swap_dir(*off.nvme_path, states + grads + (one_dir ? params : 0),
                                           "zero_optimization.offload_optimizer.nvme_path"));
    }
    if (params_on_nvme && !one_dir) {
      ZEROD_RETURN_IF_ERROR(check_swap_dir(*off_param.nvme_path, params, "zero_optimization.offload_param.nvme_path"));
    }
  }

  const int64_t S = part_.shard_numel(), P = part_.padded_numel(), ds = dtype_size(dtype_);
  if (stage_ < 3) {
    ZEROD_RETURN_IF_ERROR(alloc(params_, P * ds, Category::kParams));
  } else if (params_offloaded_) {
    ShardStoreSettings ps{off_param.device,
                          Category::kParams,
                          params_on_nvme ? swap_file_path(*off_param.nvme_path, "params", comm_->rank()) : "",
                          off_param.buffer_count,
                          buffer_tier(off_param),
                          {cfg_.aio_block_size, cfg_.aio_queue_depth},
                          swap_fault_hook()};
    ZEROD_ASSIGN_OR_RETURN(param_store_, ShardStore::create(chunks, part_.chunk(1), dtype_, ps));
  } else {
    ZEROD_RETURN_IF_ERROR(alloc(param_shard_, S * ds, Category::kParams));
  }
  // With fp32 parameters in memory, the rank's own chunks of them are the master weights.
  if (separate_master_ && !swapped) ZEROD_RETURN_IF_ERROR(alloc(master_, S * 4, Category::kOptimizer));
  if (stage_ <= 1) ZEROD_RETURN_IF_ERROR(alloc(grads_full_, P * 4, Category::kGrads));
  if (grads_offloaded_) {
    ShardStoreSettings gs{OffloadDevice::kNvme,
                          Category::kGrads,
                          swap_file_path(*off.nvme_path, "grads", comm_->rank()),
                          off.buffer_count,
                          buffer_tier(off),
                          {cfg_.aio_block_size, cfg_.aio_queue_depth},
                          swap_fault_hook()};
    ZEROD_ASSIGN_OR_RETURN(grad_store_, ShardStore::create(chunks, part_.chunk(1), DType::kF32, gs));
    grads_fresh_.assign(part_.num_units(), true);
  } else if (stage_ >= 1) {
    ZEROD_RETURN_IF_ERROR(alloc(grad_shard_, S * 4, Category::kGrads));
  }
  ZEROD_RETURN_IF_ERROR(alloc(unit_sums_, part_.num_units() * 8, Category::kWorkspace));
  ZEROD_ASSIGN_OR_RETURN(unit_sums_host_, device_.allocate(part_.num_units() * 8, Category::kWorkspace, Tier::kHost));
  // The zeroed buffers are written by the host from here on.
  ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));

  // The optimizer writes the 16-bit working copy of what it updates, when
  // that is in memory; an offloaded one is written from the masters after.
  std::vector<ParamPiece> pieces;
  for (size_t i = 0; i < owned_.size(); ++i) {
    const ShardSegment& s = owned_[i];
    ParamPiece p = shape[i];
    if (!grads_offloaded_) p.grad = grad_shard() + s.shard_offset;
    if (separate_master_ && !params_offloaded_) p.param16 = working_at(s, 0);
    if (!(separate_master_ && swapped)) p.master = master_at(s);
    pieces.push_back(p);
  }
  if (swapped) {
    SwapSettings ss{swap_file_path(*off.nvme_path, "optimizer", comm_->rank()),
                    cfg_.zero.sub_group_size,
                    off.buffer_count,
                    buffer_tier(off),
                    {cfg_.aio_block_size, cfg_.aio_queue_depth},
                    swap_fault_hook(),
                    grads_offloaded_};
    SwappedOptimizer::Fill init;
    if (separate_master_) {
      init = [&](int k, int64_t start, int64_t n, float* dst) {
        const ShardSegment& s = owned_[k];
        ZEROD_RETURN_IF_ERROR(initial_params(s.flat_offset + start, s.flat_offset + start + n, dst));
        return write_working(s, start, dst, n);
      };
    } else {
      ZEROD_RETURN_IF_ERROR(init_params());
    }
    ZEROD_ASSIGN_OR_RETURN(swapped_, SwappedOptimizer::create(cfg_.optimizer, std::move(pieces), dtype_, init, ss));
  } else {
    ZEROD_RETURN_IF_ERROR(init_params());
    ZEROD_ASSIGN_OR_RETURN(optimizer_, Optimizer::create(cfg_.optimizer, std::move(pieces), dtype_));
  }
  init_from_.reset();
  if (param_store_) ZEROD_RETURN_IF_ERROR(param_store_->flush());
  if (stage_ < 3) {
    ZEROD_ASSIGN_OR_RETURN(FlatWeights w, FlatWeights::create(layout_, dtype_, params_.data(), device_, kernels_,
                                                              part_.padded_unit_offsets()));
    flat_weights_ = std::make_unique<FlatWeights>(std::move(w));
  } else {
    sharded_weights_ = std::make_unique<ShardedWeights>(this);
    ZEROD_RETURN_IF_ERROR(sharded_weights_->allocate());
  }
  if (stage_ <= 1) {
    flat_grads_ = std::make_unique<FlatGrads>(layout_, grads_full_.ptr<float>(), part_.padded_unit_offsets());
  } else {
    sharded_grads_ = std::make_unique<ShardedGrads>(this);
    ZEROD_RETURN_IF_ERROR(sharded_grads_->allocate());
  }
  // Gathers write the zeroed slots from the comm thread.
  ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));
  return publish_params();
}

void ZeroEngine::set_swap_fault_hook(IoFaultHook hook) { swap_fault_hook() = std::move(hook); }

absl::Status ZeroEngine::alloc(Buffer& b, int64_t bytes, Category c) {
  ZEROD_ASSIGN_OR_RETURN(b, device_.allocate(bytes, c));
  device_.memset(stream_, b.data(), 0, bytes);
  return absl::OkStatus();
}

WeightSource& ZeroEngine::weights() {
  if (sharded_weights_) return *sharded_weights_;
  return *flat_weights_;
}

GradSink& ZeroEngine::grads() {
  if (sharded_grads_) return *sharded_grads_;
  return *flat_grads_;
}

absl::Status ZeroEngine::initial_params(int64_t begin, int64_t end, float* out) const {
  if (init_from_) return init_from_->read(begin, end, out);
  init_gpt_range(*layout_, cfg_.run.seed, begin, end, out);
  return absl::OkStatus();
}

absl::Status ZeroEngine::init_params() {
  for (const ShardSegment& s : owned_) {
    float* master = master_at(s);
    ZEROD_RETURN_IF_ERROR(initial_params(s.flat_offset, s.flat_offset + s.numel, master));
    if (separate_master_) ZEROD_RETURN_IF_ERROR(write_working(s, 0, master, s.numel));
  }
  return absl::OkStatus();
}

char* ZeroEngine::working_at(const ShardSegment& s, int64_t start) {
  const int64_t k = s.shard_offset - part_.shard_offset(s.unit) + start;
  return working().host<char>() + (working_offset(s.unit) + k) * dtype_size(dtype_);
}

float* ZeroEngine::master_at(const ShardSegment& s) const {
  return master_unit(s.unit) + (s.shard_offset - part_.shard_offset(s.unit));
}

absl::Status ZeroEngine::write_working(const ShardSegment& s, int64_t start, const float* src, int64_t n) {
  if (param_store_) return param_store_->put(s.shard_offset + start, src, n);
  convert_from_f32(dtype_, src, working_at(s, start), n);
  return absl::OkStatus();
}

float* ZeroEngine::grad_shard() const { return (stage_ == 0 ? grads_full_ : grad_shard_).ptr<float>(); }

int64_t ZeroEngine::working_offset(int u) const {
  return stage_ == 3 ? part_.shard_offset(u) : part_.padded_offset(u) + owner_ * part_.chunk(u);
}

float* ZeroEngine::master_unit(int u) const {
  if (master_.data()) return master_.host<float>() + part_.shard_offset(u);
  return (stage_ == 3 ? param_shard_ : params_).host<float>() + working_offset(u);
}

void ZeroEngine::zero_grads() {
  if (grad_store_) {
    grads_fresh_.assign(part_.num_units(), true);
    return;
  }
  Buffer& g = stage_ <= 1 ? grads_full_ : grad_shard_;
  device_.memset(stream_, g.data(), 0, g.bytes());
}

absl::Status ZeroEngine::reduce_gradients() {
  // Stages 0 and 1 reduce what backward wrote; 2 and 3 what it wrote, and
  // then add their chunks on the stream.
  absl::Status s = device_.synchronize(stream_);
  if (stage_ == 0) {
    s.Update(all_reduce(*comm_, grads_full_.data(), part_.padded_numel(), CommType::kF32, ReduceOp::kSum));
  } else if (stage_ == 1) {
    std::vector<WorkPtr> works;
    for (int u = 0; u < part_.num_units(); ++u) {
      works.push_back(comm_->reduce_scatter(grads_full_.ptr<float>() + part_.padded_offset(u),
                                            grad_shard_.ptr<float>() + part_.shard_offset(u), part_.chunk(u),
                                            CommType::kF32, ReduceOp::kSum));
    }
    s.Update(wait_all(works));
  } else {
    s.Update(sharded_grads_->flush());
  }
  // The optimizer reads the gradients on the host.
  s.Update(device_.synchronize(stream_));
  return s;
}

absl::StatusOr<double> ZeroEngine::grad_sum_squares() {
  // Unit by unit, so that gradients in a file (read a unit ahead) give the
  // same sum as in memory.
  double* sums = unit_sums_.ptr<double>();
  for (int u = 0; u < part_.num_units(); ++u) {
    const float* g = grad_shard() ? grad_shard() + part_.shard_offset(u) : nullptr;
    if (grad_store_) {
      ZEROD_ASSIGN_OR_RETURN(void* stored, grad_store_->acquire(u));
      if (u + 1 < part_.num_units()) ZEROD_RETURN_IF_ERROR(grad_store_->fetch(u + 1));
      g = static_cast<const float*>(stored);
    }
    kernels_.sum_squares(stream_, g, part_.chunk(u), sums + u);
    if (grad_store_) {
      // The window is read again by the next fetch.
      ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));
      grad_store_->release(u);
    }
  }
  device_.copy(stream_, unit_sums_host_.data(), sums, part_.num_units() * 8);
  ZEROD_RETURN_IF_ERROR(device_.synchronize(stream_));
  double sumsq = 0;
  for (int u = 0; u < part_.num_units(); ++u) sumsq += unit_sums_host_.host<double>()[u];
  // Under stage 0 every rank holds all the (reduced) gradients already.
  if (stage_ > 0) ZEROD_RETURN_IF_ERROR(all_reduce(*comm_, &sumsq, 1, CommType::kF64, ReduceOp::kSum));
  return sumsq;
}

absl::Status ZeroEngine::apply_optimizer(float lr, int64_t step, float grad_factor) {
  // An offloaded working copy is written back from the updated masters,
  // sub-group by sub-group when those stream through a file.
  SwappedOptimizer::MasterOut updated;
  if (param_store_) {
    updated = [this](int k, int64_t start, int64_t n, const float* master) {
      return write_working(owned_[k], start, master, n);
    };
  }
  // Offloaded gradients come back unit by unit as the sub-groups need
  // them, the next unit read ahead.
  SwappedOptimizer::Fill grads;
  int held = -1;
  if (grad_store_) {
    grads = [&](int k, int64_t start, int64_t n, float* dst) {
      const ShardSegment& s = owned_[k];
      const bool next_unit = held != s.unit;
      if (next_unit && held >= 0) grad_store_->release(held);
      held = s.unit;
      ZEROD_ASSIGN_OR_RETURN(void* unit, grad_store_->acquire(held));
      if (next_unit && held + 1 < part_.num_units()) ZEROD_RETURN_IF_ERROR(grad_store_->fetch(held + 1));
      const float* src = static_cast<const float*>(unit) + (s.shard_offset - part_.shard_offset(s.unit)) + start;
      std::memcpy(dst, src, n * 4);
      return absl::OkStatus();
    };
  }
  if (swapped_) {
    absl::Status stepped = swapped_->step(lr, step, grad_factor, grads, updated);
    if (grad_store_) stepped.Update(grad_store_->drop());
    ZEROD_RETURN_IF_ERROR(stepped);
  } else {
    optimizer_->step(lr, step, grad_factor);
    if (param_store_) {
      for (const ShardSegment& s : owned_) ZEROD_RETURN_IF_ERROR(write_working(s, 0, master_at(s), s.numel));
    }
  }
  if (param_store_) ZEROD_RETURN_IF_ERROR(param_store_->flush());
  return publish_params();
}

// The owned chunks are up to date (the optimizer wrote them); the other
// ranks' chunks are gathered (stages 1-2) or fetched on demand (stage 3).
absl::Status ZeroEngine::publish_params() {
  if (stage_ == 3) return sharded_weights_->invalidate();
  if (stage_ > 0) {
    const int64_t ds = dtype_size(dtype_);
    std::vector<WorkPtr> works;
    for (int u = 0; u < part_.num_units(); ++u) {
      char* unit = params_.ptr<char>() + part_.padded_offset(u) * ds;
      works.push_back(comm_->all_gather(unit + owner_ * part_.chunk(u) * ds, unit, part_.chunk(u), comm_type(dtype_)));
    }
    ZEROD_RETURN_IF_ERROR(wait_all(works));
  }
  flat_weights_->invalidate();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ZeroEngine::gather_master_params() {
  std::vector<float> out(layout_->num_params());
  const int n = part_.world_size();
  // Masters swapped to a file come back into a shard-shaped buffer first.
  std::vector<float> swapped_master;
  if (swapped_ && separate_master_) {
    swapped_master.resize(part_.shard_numel());
    ZEROD_RETURN_IF_ERROR(swapped_->read_masters([&](int k, int64_t start, int64_t n, const float* m) {
      std::memcpy(swapped_master.data() + owned_[k].shard_offset + start, m, n * sizeof(float));
      return absl::OkStatus();
    }));
  }
  for (int u = 0; u < part_.num_units(); ++u) {
    const float* src = swapped_master.empty() ? master_unit(u) : swapped_master.data() + part_.shard_offset(u);
    if (n > 1) {
      ZEROD_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate(part_.chunk(u) * n * 4, Category::kWorkspace));
      ZEROD_RETURN_IF_ERROR(comm_->all_gather(src, b.data(), part_.chunk(u), CommType::kF32)->wait());
      std::memcpy(out.data() + part_.unit_begin(u), b.data(), part_.unit_numel(u) * 4);
    } else {
      std::memcpy(out.data() + part_.unit_begin(u), src, part_.unit_numel(u) * 4);
    }
  }
  return out;
}

}  // namespace zerod
