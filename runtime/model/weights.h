// Where the model's forward and backward read their weights from. The model
// asks for the global tensors and for one layer at a time, always as fp32;
// a source decides how (views into fp32 parameters, conversion of 16-bit
// parameters, and later gathering ZeRO-3 shards).
#pragma once

#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/model/gpt_layout.h"

namespace zerod {

struct GlobalWeights {
  const float *wte, *wpe, *lnfw, *lnfb;
};

struct LayerWeights {
  const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  const float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Valid until the parameters change (the source is told by invalidate()).
  virtual GlobalWeights globals() = 0;
  // Valid until the next layer() call.
  virtual LayerWeights layer(int l) = 0;
  // The parameters were updated; drop anything converted from them.
  virtual void invalidate() {}
};

// Pointers into `params` of `layout`: a fp32 flat buffer, or a bf16/fp16 one
// whose tensors are converted into fp32 staging (globals once per update,
// one layer at a time).
class FlatWeights : public WeightSource {
 public:
  static absl::StatusOr<FlatWeights> create(const GptLayout* layout, DType dtype, const void* params);
  GlobalWeights globals() override;
  LayerWeights layer(int l) override;
  void invalidate() override { globals_ready_ = false; }

 private:
  const float* view(int id, int layer, float* staging);

  const GptLayout* layout_ = nullptr;
  DType dtype_ = DType::kF32;
  const void* params_ = nullptr;
  Buffer global_staging_, layer_staging_;
  bool globals_ready_ = false;
};

// Gradient pointers of one layer in a fp32 flat gradient buffer.
struct LayerGrads {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
  float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
LayerGrads layer_grads(const GptLayout& layout, float* grads, int l);

}  // namespace zerod
