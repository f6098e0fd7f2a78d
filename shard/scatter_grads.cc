#include "shard/scatter_grads.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace zerod {

ScatterGrads::~ScatterGrads() {
  flush().IgnoreError();
  ctx_.device.synchronize(ctx_.stream).IgnoreError();
}

int ScatterGrads::layer_slots(const GptLayout& layout, const ZeroConfig& z) {
  if (!z.overlap_comm) return 1;
  const int64_t fit = z.reduce_bucket_size / std::max<int64_t>(1, layout.unit_numel(1));
  return static_cast<int>(std::clamp<int64_t>(fit, 2, std::max(2, layout.config().n_layer)));
}

std::vector<BufferSpec> ScatterGrads::buffers(const ZeroShape& shape, const ZeroConfig& z) {
  const Partition& p = shape.part;
  const int chunks = p.world_size() > 1 ? 1 : 0;  // a world of one reduces nothing
  std::vector<BufferSpec> specs;
  auto slots = [&](const char* what, int u, int count) {
    specs.push_back({absl::StrCat(what, ", gradients to reduce"), Category::kComm,
                     static_cast<uint64_t>(p.chunk(u) * p.world_size() * 4), count});
    specs.push_back({absl::StrCat(what, ", reduced chunk"), Category::kComm, static_cast<uint64_t>(p.chunk(u) * 4),
                     count * chunks});
  };
  slots("reduce-scatter of a layer", 1, layer_slots(shape.layout, z));
  slots("reduce-scatter of the embeddings", 0, 1);
  slots("reduce-scatter of the final LayerNorm", shape.layout.final_unit(), 1);
  return specs;
}

absl::Status ScatterGrads::allocate(const ZeroConfig& z) {
  overlap_ = z.overlap_comm;
  alone_ = ctx_.part.world_size() == 1;
  const std::vector<BufferSpec> specs = buffers(ctx_, z);
  layers_.resize(specs[kLayerGrads].count);
  for (Slot& s : layers_) ZEROD_RETURN_IF_ERROR(allocate_slot(s, specs[kLayerGrads], specs[kLayerChunks]));
  ZEROD_RETURN_IF_ERROR(allocate_slot(emb_, specs[kEmbeddingGrads], specs[kEmbeddingChunk]));
  return allocate_slot(fin_, specs[kFinalNormGrads], specs[kFinalNormChunk]);
}

absl::StatusOr<GlobalGrads> ScatterGrads::globals() {
  ZEROD_RETURN_IF_ERROR(fill(emb_, 0));
  ZEROD_RETURN_IF_ERROR(fill(fin_, ctx_.layout.final_unit()));
  return global_grad_views(ctx_.layout, emb_.staging.ptr<float>(), fin_.staging.ptr<float>());
}

absl::StatusOr<LayerGrads> ScatterGrads::layer(int l) {
  // Its reduction, if still in flight, is the oldest of the layers'.
  Slot& s = layers_[next_layer_++ % layers_.size()];
  ZEROD_RETURN_IF_ERROR(fill(s, GptLayout::layer_unit(l)));
  return layer_grad_views(ctx_.layout, s.staging.ptr<float>());
}

absl::Status ScatterGrads::layer_done(int l) {
  for (Slot& s : layers_) {
    if (s.unit == GptLayout::layer_unit(l) && !s.work) return launch(s);
  }
  return absl::OkStatus();
}

absl::Status ScatterGrads::end_backward() {
  ZEROD_RETURN_IF_ERROR(launch(emb_));
  return launch(fin_);
}

absl::Status ScatterGrads::flush() {
  absl::Status first;
  while (!in_flight_.empty()) first.Update(complete(*in_flight_.front()));
  return first;
}

absl::Status ScatterGrads::allocate_slot(Slot& s, const BufferSpec& grads, const BufferSpec& chunk) {
  ZEROD_RETURN_IF_ERROR(ctx_.alloc(s.staging, grads));
  return chunk.count > 0 ? ctx_.alloc(s.recv, chunk) : absl::OkStatus();
}

absl::Status ScatterGrads::fill(Slot& s, int u) {
  if (s.work) ZEROD_RETURN_IF_ERROR(complete(s));
  if (alone_) ZEROD_RETURN_IF_ERROR(target_.reusing(s.staging));
  s.unit = u;
  ctx_.device.memset(ctx_.stream, s.staging.data(), 0, s.staging.bytes());
  return absl::OkStatus();
}

absl::Status ScatterGrads::launch(Slot& s) {
  if (alone_) {
    // Backward's gradients are the reduced chunk, in the compute stream's
    // order: the target's work on that stream follows them.
    ZEROD_RETURN_IF_ERROR(target_.started(s.unit));
    return target_.add(std::exchange(s.unit, -1), s.staging);
  }
  // The reduction reads what backward wrote to the staging, and writes the
  // recv buffer the last add (enqueued before that) reads.
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
  ZEROD_RETURN_IF_ERROR(target_.reusing(s.recv));
  s.work = ctx_.comm.reduce_scatter(s.staging.data(), s.recv.data(), ctx_.part.chunk(s.unit), CommType::kF32,
                                    ReduceOp::kSum);
  in_flight_.push_back(&s);
  ZEROD_RETURN_IF_ERROR(target_.started(s.unit));
  return overlap_ ? absl::OkStatus() : complete(s);
}

absl::Status ScatterGrads::complete(Slot& s) {
  const int u = std::exchange(s.unit, -1);
  in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), &s));
  ZEROD_RETURN_IF_ERROR(timed_wait(*std::exchange(s.work, nullptr), &ctx_.pass_wait_s));
  return target_.add(u, s.recv);
}

}  // namespace zerod
