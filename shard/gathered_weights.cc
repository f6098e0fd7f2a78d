#include "shard/gathered_weights.h"

#include "runtime/core/profiler.h"

namespace zerod {

GatheredWeights::~GatheredWeights() {
  // A pass that stopped at a failure may have left gathers in flight into
  // the slots, and kernels reading them queued on the stream.
  end_pass().IgnoreError();
  ctx_.device.synchronize(ctx_.stream).IgnoreError();
}

int GatheredWeights::layer_slots(const GptLayout& layout, const ZeroConfig& z) {
  if (layout.unit_numel(1) < z.stage3_param_persistence_threshold) return layout.config().n_layer;
  return z.stage3_prefetch_bucket_size > 0 ? 2 : 1;
}

std::vector<BufferSpec> GatheredWeights::buffers(const ZeroShape& shape, const ZeroConfig& z) {
  const GptLayout& L = shape.layout;
  const Partition& p = shape.part;
  const uint64_t ds = dtype_size(shape.dtype) * p.world_size();
  std::vector<BufferSpec> specs = {
      {"gathered layers", shape.params, p.chunk(1) * ds, layer_slots(L, z)},
      {"gathered embeddings", shape.params, p.chunk(0) * ds},
      {"gathered final LayerNorm", shape.params, p.chunk(L.final_unit()) * ds},
  };
  // Packed units hold their globals as operands and unpack their layers themselves.
  const DType held = shape.packed ? shape.operands : shape.dtype;
  for (BufferSpec& b : weight_staging_buffers(L, held, shape.operands)) specs.push_back(std::move(b));
  return specs;
}

absl::Status GatheredWeights::allocate(const ZeroConfig& z) {
  const GptLayout& L = ctx_.layout;
  persistent_layers_ = L.unit_numel(1) < z.stage3_param_persistence_threshold;
  persistent_globals_ = L.unit_numel(0) + L.unit_numel(L.final_unit()) < z.stage3_param_persistence_threshold;
  prefetch_ = z.stage3_prefetch_bucket_size > 0;
  if (shards_.on_host()) {
    ZEROD_ASSIGN_OR_RETURN(upload_, ctx_.device.create_stream());
  }
  ZEROD_RETURN_IF_ERROR(check_weight_types(ctx_.dtype, ctx_.operands));
  const std::vector<BufferSpec> specs = buffers(ctx_, z);
  layers_.resize(specs[kLayerSlots].count);
  for (Slot& s : layers_) ZEROD_RETURN_IF_ERROR(allocate_slot(s, specs[kLayerSlots]));
  ZEROD_RETURN_IF_ERROR(allocate_slot(emb_, specs[kEmbeddings]));
  ZEROD_RETURN_IF_ERROR(allocate_slot(fin_, specs[kFinalNorm]));
  const BufferSpec* staging = &specs[kNumGathered];
  if (staging[kGlobalStaging].count > 0) {
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(global_staging_, staging[kGlobalStaging]));
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(layer_staging_, staging[kLayerStaging]));
  }
  // Gathers write the zeroed slots from the comm thread.
  return ctx_.device.synchronize(ctx_.stream);
}

absl::StatusOr<GlobalWeights> GatheredWeights::globals() {
  const GptLayout& L = ctx_.layout;
  ZEROD_ASSIGN_OR_RETURN(const bool fresh_emb, acquire(emb_, 0));
  ZEROD_ASSIGN_OR_RETURN(const bool fresh_fin, acquire(fin_, L.final_unit()));
  const DType held = ctx_.packed ? ctx_.operands : ctx_.dtype;
  if (fresh_emb || fresh_fin || !needs_staging(held, ctx_.operands)) {
    globals_ = global_weight_views(ctx_.converter(), L, held, emb_.buf.data(), fin_.buf.data(), global_staging_.data());
  }
  return globals_;
}

absl::StatusOr<LayerWeights> GatheredWeights::layer(int l) {
  const int u = GptLayout::layer_unit(l);
  // The model has enqueued all its work on the layer before.
  if (current_) ctx_.device.record(ctx_.stream, *current_->used);
  Slot* s = find(u);
  if (!s) {
    s = &slot_for(u);
    ZEROD_RETURN_IF_ERROR(start(*s, u));
  }
  ZEROD_RETURN_IF_ERROR(finish(*s));
  current_ = s;
  if (unpack_) return unpack_(s->buf.data());
  return layer_weight_views(ctx_.converter(), ctx_.layout, ctx_.dtype, s->buf.data(), layer_staging_.data());
}

absl::Status GatheredWeights::prefetch(int next, int then) {
  if (!prefetch_ || next < 0) return absl::OkStatus();
  const int u = GptLayout::layer_unit(next);
  if (find(u)) return absl::OkStatus();
  ZEROD_RETURN_IF_ERROR(start(slot_for(u), u));
  // The chunk of the layer after is read ahead, so that a read from an
  // offload tier overlaps a layer's compute.
  if (then >= 0 && then != next) return shards_.read_ahead(GptLayout::layer_unit(then));
  return absl::OkStatus();
}

absl::Status GatheredWeights::end_pass() {
  absl::Status first;
  for (Slot* s : all_slots()) {
    first.Update(finish(*s));
    if (s->used) ctx_.device.record(ctx_.stream, *s->used);  // none when allocate() failed
  }
  if (!persistent_layers_) release_layers();
  if (!persistent_globals_) emb_.unit = fin_.unit = -1;
  current_ = nullptr;
  first.Update(shards_.drop());
  return first;
}

absl::Status GatheredWeights::invalidate() {
  absl::Status s = end_pass();
  release_layers();
  emb_.unit = fin_.unit = -1;
  return s;
}

absl::Status GatheredWeights::allocate_slot(Slot& s, const BufferSpec& spec) {
  ZEROD_ASSIGN_OR_RETURN(s.used, ctx_.device.create_event());
  return ctx_.alloc(s.buf, spec);
}

std::vector<GatheredWeights::Slot*> GatheredWeights::all_slots() {
  std::vector<Slot*> all = {&emb_, &fin_};
  for (Slot& s : layers_) all.push_back(&s);
  return all;
}

GatheredWeights::Slot* GatheredWeights::find(int u) {
  for (Slot& s : layers_) {
    if (s.unit == u) return &s;
  }
  return nullptr;
}

GatheredWeights::Slot& GatheredWeights::slot_for(int u) {
  if (persistent_layers_) return layers_[u - 1];
  for (Slot& s : layers_) {
    if (&s != current_) return s;
  }
  return layers_[0];
}

void GatheredWeights::release_layers() {
  for (Slot& s : layers_) s.unit = -1;
}

// A rank that cannot read its chunk still takes part (sending what the slot
// holds, so that no peer waits on it) and returns the error. A chunk in
// host memory is copied into its place in the slot on the upload stream
// (beside the kernels still running) and gathered in place from there.
absl::Status GatheredWeights::start(Slot& slot, int u) {
  ZEROD_RETURN_IF_ERROR(finish(slot));
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(*slot.used));
  const int64_t chunk = ctx_.part.chunk(u);
  const int64_t bytes = chunk * dtype_size(ctx_.dtype);
  char* own = slot.buf.ptr<char>() + ctx_.owner * bytes;
  absl::StatusOr<const void*> mine;
  {
    auto span = Profiler::host_span(ctx_.device.profiler(), "parameter shard from its store (host or NVMe)");
    mine = shards_.acquire(u);
  }
  slot.acquired = mine.ok();
  if (mine.ok() && upload_) {
    ctx_.device.copy(*upload_, own, *mine, bytes);
    if (absl::Status s = ctx_.device.synchronize(*upload_); !s.ok()) mine = s;
  }
  const void* send = mine.ok() && !upload_ ? *mine : own;
  slot.unit = u;
  slot.work = ctx_.comm.all_gather(send, slot.buf.data(), chunk, comm_type(ctx_.dtype));
  return mine.status();
}

absl::Status GatheredWeights::finish(Slot& s) {
  absl::Status gathered;
  if (s.work) gathered = timed_wait(*std::exchange(s.work, nullptr), &ctx_.pass_wait_s);
  if (std::exchange(s.acquired, false)) shards_.release(s.unit);
  if (!gathered.ok()) s.unit = -1;  // holds nothing usable
  return gathered;
}

absl::StatusOr<bool> GatheredWeights::acquire(Slot& s, int u) {
  if (s.unit == u) return false;
  ZEROD_RETURN_IF_ERROR(start(s, u));
  ZEROD_RETURN_IF_ERROR(finish(s));
  return true;
}

}  // namespace zerod
