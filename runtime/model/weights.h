// Where the model's forward and backward read their weights from and put
// their gradients. The model asks for the global tensors and for one layer at
// a time, weights always as operands of its kernel table (kernels.h); a
// source decides how (views into parameters of that type, conversion of
// others, gathering ZeRO-3 shards), and a sink
// decides where gradients go (a flat buffer, or staging that is
// reduce-scattered as each layer's backward finishes).
#pragma once

#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/gpt_layout.h"
#include "runtime/model/lora.h"

namespace zerod {

// Operands of the kernel table. A Llama's wte is embed_tokens, lnfw its
// final norm; lm_head is its untied head (null where the head is wte).
struct GlobalWeights {
  const void *wte, *wpe, *lnfw, *lnfb, *lm_head;
  const void* head() const { return lm_head ? lm_head : wte; }
};

// A tensor the source's layout does not hold is null: an adapter layout's
// model weights, the model's adapters.
struct LayerWeights {
  const void *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  const void *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  LoraWeights lora[kNumLoraTargets] = {};  // by LoraTarget
};

// Every call returns its failure (a collective or a read that failed), and
// the model stops at the first: a view is never handed out over data that
// did not arrive.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The type the weights are values of (they are handed out as operands).
  virtual DType dtype() const = 0;
  // Valid until end_pass().
  virtual absl::StatusOr<GlobalWeights> globals() = 0;
  // Valid until the next layer() call.
  virtual absl::StatusOr<LayerWeights> layer(int l) = 0;
  // Layer `next` will be asked for next, and `then` after it (-1: none, the
  // pass ends): a source may start fetching them now.
  virtual absl::Status prefetch(int /*next*/, int /*then*/) { return absl::OkStatus(); }
  // A forward (or forward and backward) pass is over: release what it held.
  virtual absl::Status end_pass() { return absl::OkStatus(); }
};

struct GlobalGrads {
  float *wte, *wpe, *lnfw, *lnfb, *lm_head;
  float* head() const { return lm_head ? lm_head : wte; }
};

struct LayerGrads {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  LoraGrads lora[kNumLoraTargets] = {};
};

// Backward adds into these: globals() is asked once at the start of backward
// and stays valid to end_backward(); layer(l) once per layer, and
// layer_done(l) says that layer's gradients of this pass are complete.
// Failures are returned as with WeightSource.
class GradSink {
 public:
  virtual ~GradSink() = default;
  virtual absl::StatusOr<GlobalGrads> globals() = 0;
  virtual absl::StatusOr<LayerGrads> layer(int l) = 0;
  virtual absl::Status layer_done(int /*l*/) { return absl::OkStatus(); }
  virtual absl::Status end_backward() { return absl::OkStatus(); }
};

// Where weights of another type become the table's operands: on the
// stream the model computes on, in order with its kernels.
struct Converter {
  Kernels& kernels;
  Stream& stream;
};

// Views of units of `dtype` laid out as in `layout`: `emb` and `fin`
// point at the embedding and final-LayerNorm units, `unit` at one
// layer's. Parameters of the table's operand type are returned in place;
// others (16-bit ones for the CPU's fp32, fp32 ones for a 16-bit GPU table)
// are converted into `staging` (operands, unit-sized).
GlobalWeights global_weight_views(const Converter& cv, const GptLayout& layout, DType dtype, const void* emb,
                                  const void* fin, void* staging);
LayerWeights layer_weight_views(const Converter& cv, const GptLayout& layout, DType dtype, const void* unit,
                                void* staging);
GlobalGrads global_grad_views(const GptLayout& layout, float* emb, float* fin);
LayerGrads layer_grad_views(const GptLayout& layout, float* unit);

// Element offsets of each unit in a buffer: the layout's own (contiguous) or
// ZeRO's padded ones.
std::vector<int64_t> contiguous_unit_offsets(const GptLayout& layout);

// A source of weights of another type than the operands hands them out as
// converted copies: of the global tensors (embeddings, final LayerNorm) and
// of one layer. Their elements; whether a source of `dtype` needs them for
// operands of type `operands`; and those two workspace buffers on the
// device, by WeightStagingBuffer (none where it does not).
struct WeightStaging {
  int64_t globals, layer;
};
WeightStaging weight_staging(const GptLayout& layout);
inline bool needs_staging(DType dtype, DType operands) { return dtype != operands; }
// Weights of `dtype` can reach operands of `operands`: the same type, or
// one of the two fp32 (the converter goes to or from fp32).
absl::Status check_weight_types(DType dtype, DType operands);
enum WeightStagingBuffer { kGlobalStaging, kLayerStaging };
std::vector<BufferSpec> weight_staging_buffers(const GptLayout& layout, DType dtype, DType operands);

// Weights in one flat buffer of `dtype` on `device` whose units start at
// `unit_offsets`; converted globals are converted once per parameter
// update (invalidate()).
class FlatWeights : public WeightSource {
 public:
  static absl::StatusOr<FlatWeights> create(const GptLayout* layout, DType dtype, const void* params, Device& device,
                                            Kernels& kernels, std::vector<int64_t> unit_offsets = {});
  DType dtype() const override { return dtype_; }
  absl::StatusOr<GlobalWeights> globals() override;
  absl::StatusOr<LayerWeights> layer(int l) override;
  void invalidate() { globals_ready_ = false; }

 private:
  explicit FlatWeights(Converter convert) : convert_(convert) {}
  const void* unit(int u) const;

  Converter convert_;
  const GptLayout* layout_ = nullptr;
  DType dtype_ = DType::kF32;
  const void* params_ = nullptr;
  std::vector<int64_t> unit_offsets_;
  Buffer global_staging_, layer_staging_;
  GlobalWeights globals_{};
  bool globals_ready_ = false;
};

// A frozen model's weights with the adapters of `adapters` (a source over
// an adapter layout) beside each layer's: what a LoRA pass computes with.
class AdaptedWeights : public WeightSource {
 public:
  AdaptedWeights(WeightSource& model, WeightSource& adapters) : model_(model), adapters_(adapters) {}
  DType dtype() const override { return model_.dtype(); }
  absl::StatusOr<GlobalWeights> globals() override { return model_.globals(); }
  absl::StatusOr<LayerWeights> layer(int l) override;
  absl::Status prefetch(int next, int then) override;
  absl::Status end_pass() override;

 private:
  WeightSource& model_;
  WeightSource& adapters_;
};

// Gradients added straight into one fp32 flat buffer whose units start at
// `unit_offsets` (the layout's own when empty).
class FlatGrads : public GradSink {
 public:
  FlatGrads(const GptLayout* layout, float* grads, std::vector<int64_t> unit_offsets = {});
  absl::StatusOr<GlobalGrads> globals() override;
  absl::StatusOr<LayerGrads> layer(int l) override;

 private:
  const GptLayout* layout_;
  float* grads_;
  std::vector<int64_t> unit_offsets_;
};

}  // namespace zerod
