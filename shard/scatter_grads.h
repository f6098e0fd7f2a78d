// Stages 2 and 3's gradient sink: each unit's gradients are written to a
// staging buffer and reduce-scattered as soon as backward is done with
// them, and the rank's reduced chunk goes to a Target (a shard in memory,
// or a file). Layer staging buffers are a small pool: with overlap_comm, as
// many as reduce_bucket_size elements allow (at least two, so one layer's
// backward runs while the last one's reduce-scatter is in flight); without,
// one, waited on at once. In a world of one the staging buffer is the
// reduced chunk: nothing is copied, and the host does not wait for
// backward.
#pragma once

#include <deque>
#include <vector>

#include "shard/zero_config.h"
#include "shard/zero_context.h"

namespace zerod {

class ScatterGrads : public GradSink {
 public:
  // Where each unit's reduced chunk goes.
  class Target {
   public:
    virtual ~Target() = default;
    // A reduction into unit u's chunk has started.
    virtual absl::Status started(int /*u*/) { return absl::OkStatus(); }
    // Unit u's reduced chunk (the first chunk(u) floats of `recv`) is
    // ready in the compute stream's order: work enqueued on it now reads
    // it, other streams and the host wait for that stream first.
    virtual absl::Status add(int u, const Buffer& recv) = 0;
    // A reduction (or, in a world of one, backward) is about to write
    // `recv`: what the target still reads of it off the compute stream is
    // done first.
    virtual absl::Status reusing(const Buffer& /*recv*/) { return absl::OkStatus(); }
  };

  ScatterGrads(ZeroContext& ctx, Target& target) : ctx_(ctx), target_(target) {}
  // Waits for reductions in flight and for the stream, before the buffers go.
  ~ScatterGrads() override;
  absl::Status allocate(const ZeroConfig& z);
  // What allocate() allocates, by Slots: each slot's gradients to reduce
  // and, with more than one rank, its reduced chunk.
  enum Slots { kLayerGrads, kLayerChunks, kEmbeddingGrads, kEmbeddingChunk, kFinalNormGrads, kFinalNormChunk };
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z);

  absl::StatusOr<GlobalGrads> globals() override;
  absl::StatusOr<LayerGrads> layer(int l) override;
  absl::Status layer_done(int l) override;
  absl::Status end_backward() override;
  // Every reduction completed and given to the target (all of them waited
  // for, also after one fails).
  absl::Status flush();

 private:
  struct Slot {
    Buffer staging, recv;  // no recv in a world of one: the staging is reduced
    int unit = -1;         // filling or in flight
    WorkPtr work;
  };

  // Slots for layers: with overlap_comm as many as reduce_bucket_size
  // holds (2 to n_layer), else one.
  static int layer_slots(const GptLayout& layout, const ZeroConfig& z);
  // The slot's buffers: its gradients and reduced chunk's descriptions.
  absl::Status allocate_slot(Slot& s, const BufferSpec& grads, const BufferSpec& chunk);
  absl::Status fill(Slot& s, int u);
  absl::Status launch(Slot& s);
  // Waits for s's reduction and gives the rank's chunk to the target; the
  // slot is free again either way.
  absl::Status complete(Slot& s);

  ZeroContext& ctx_;
  Target& target_;
  bool overlap_ = true;
  bool alone_ = false;  // a world of one
  std::vector<Slot> layers_;
  size_t next_layer_ = 0;  // layers take the slots in turn: the next is the one used longest ago
  Slot emb_, fin_;
  std::deque<Slot*> in_flight_;  // launch order
};

}  // namespace zerod
