// LoRA's frozen base: the model's weights with no gradients, masters or
// optimizer states, held as ZeRO holds trained parameters at the same stage:
// every rank all of them below stage 3; at stage 3 a shard each, gathered
// unit by unit, and with offload_param that shard in host memory or a file.
// In NF4 (model.lora.base_quant) the layers are held packed (Nf4Packing), so
// at stage 3 a rank holds its chunk of each packed layer and the gathers
// move NF4's bytes.
#pragma once

#include <memory>

#include "runtime/core/cpu_device.h"
#include "runtime/model/nf4_weights.h"
#include "shard/param_store.h"
#include "shard/zero_engine.h"

namespace zerod {

class FrozenWeights {
 public:
  // The values settings.init gives for `layout` (the model's), on `device`,
  // whose table `kernels` is; layout, comm, device and kernels outlive it.
  static absl::StatusOr<std::unique_ptr<FrozenWeights>> create(const GptLayout& layout, const ZeroSettings& settings,
                                                               bool nf4, Communicator& comm, Device& device,
                                                               Kernels& kernels);
  // What create() allocates for rank `rank` of `world_size` on `device`
  // (a plan states it in phase kFrozenWeights: it is built after the rest).
  static std::vector<BufferSpec> buffers(const GptLayout& layout, const ZeroSettings& settings, bool nf4,
                                         int world_size, int rank, const PlanDevice& device);
  ~FrozenWeights();

  WeightSource& weights() { return nf4_ ? static_cast<WeightSource&>(*nf4_) : params_->weights(); }

 private:
  FrozenWeights(const GptLayout& layout, const ZeroSettings& settings, bool nf4, Communicator& comm, Device& device,
                Kernels& kernels);
  // Writes this rank's part from `init` (and a file's NF4 layers,
  // `nf4_held`) and publishes it.
  absl::Status fill(const ParamInit& init, const Nf4ModuleReader& nf4_held);
  // Packed units: owned segment s (at word in_unit of the embeddings' or
  // final norm's unit) as operands, read `step` values at a time into
  // `host` and converted into `converted`.
  absl::Status fill_global(const ParamInit& init, const ShardSegment& s, int64_t in_unit, float* host, int64_t step,
                           Buffer& converted);

  CpuDevice host_;
  std::unique_ptr<Kernels> host_kernels_;
  std::optional<Nf4Packing> packing_;  // NF4 at stage 3: the units are packed layers
  ZeroContext ctx_;
  Buffer unpacked_;  // NF4 at stage 3: a gathered layer's unit of operands
  std::unique_ptr<ParamStore> params_;
  std::optional<Nf4Weights> nf4_;  // NF4 below stage 3
};

}  // namespace zerod
