// Stage 3's view of the parameters: units all-gathered from every rank's
// shard just before the model uses them. Layer units go through one slot,
// or two when prefetching (the layer in use and the next); when layers are
// below the persistence threshold every layer has its own slot, kept between
// passes until the next update.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "shard/zero_config.h"
#include "shard/zero_context.h"

namespace zerod {

// Where a gather takes this rank's chunk of a unit from: its shard in
// memory, or an offload store's window in host memory.
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  // Whether acquire() gives host memory, which is copied to the device
  // (into the chunk's place in the gathered unit) before the gather.
  virtual bool on_host() const { return false; }
  // Unit u's chunk (chunk(u) elements of the working dtype), until release(u).
  virtual absl::StatusOr<const void*> acquire(int u) = 0;
  virtual void release(int /*u*/) {}
  // Unit u will be acquired soon: a read may start now.
  virtual absl::Status read_ahead(int /*u*/) { return absl::OkStatus(); }
  // A pass is over: what was held for it goes.
  virtual absl::Status drop() { return absl::OkStatus(); }
};

// What a gathered layer unit is to the model, where units are held in a
// form of their own (NF4's packed layers) rather than as the layout's
// tensors: called with the unit once gathered, its views valid until the
// next call.
using LayerUnpack = std::function<LayerWeights(void* unit)>;

class GatheredWeights : public WeightSource {
 public:
  GatheredWeights(ZeroContext& ctx, ShardSource& shards, LayerUnpack unpack = {})
      : ctx_(ctx), shards_(shards), unpack_(std::move(unpack)) {}
  // Waits for gathers in flight and for the stream, before the slots go.
  ~GatheredWeights() override;
  absl::Status allocate(const ZeroConfig& z);
  // What allocate() allocates: the slots, by Gathered, then the weight
  // staging (weights.h).
  enum Gathered { kLayerSlots, kEmbeddings, kFinalNorm, kNumGathered };
  static std::vector<BufferSpec> buffers(const ZeroShape& shape, const ZeroConfig& z);

  DType dtype() const override { return ctx_.dtype; }
  absl::StatusOr<GlobalWeights> globals() override;
  absl::StatusOr<LayerWeights> layer(int l) override;
  absl::Status prefetch(int next, int then) override;
  // Every gather in flight is waited for, also after one fails.
  absl::Status end_pass() override;
  // The shards changed: nothing gathered is current any more.
  absl::Status invalidate();

 private:
  struct Slot {
    Buffer buf;
    int unit = -1;          // the unit held or being gathered
    WorkPtr work;           // in flight
    bool acquired = false;  // gathering from the source's chunk
    // Recorded on the compute stream after the last kernel that reads the
    // slot: a gather must not overwrite it before then.
    std::unique_ptr<Event> used;
  };

  // Slots for layers: one a layer when they persist, else two with
  // prefetching, else one.
  static int layer_slots(const GptLayout& layout, const ZeroConfig& z);
  absl::Status allocate_slot(Slot& s, const BufferSpec& spec);
  std::vector<Slot*> all_slots();
  Slot* find(int u);
  // Where unit u goes: with persistent layers each has its own slot;
  // otherwise any slot but the one in use.
  Slot& slot_for(int u);
  void release_layers();
  // Starts gathering unit u into the slot.
  absl::Status start(Slot& slot, int u);
  absl::Status finish(Slot& s);
  // Gathers unit u into s unless it is there; true when it was gathered now.
  absl::StatusOr<bool> acquire(Slot& s, int u);

  ZeroContext& ctx_;
  ShardSource& shards_;
  const LayerUnpack unpack_;
  bool persistent_layers_ = false, persistent_globals_ = false, prefetch_ = true;
  std::vector<Slot> layers_;
  Slot emb_, fin_;
  Slot* current_ = nullptr;
  std::unique_ptr<Stream> upload_;  // host chunks to the device, beside the compute stream
  Buffer layer_staging_, global_staging_;
  GlobalWeights globals_{};
};

}  // namespace zerod
