// LoRA's frozen base: the model's weights with no gradients, masters or
// optimizer states. In the working precision they are held as ZeRO holds
// trained parameters at the same stage (every rank all of them below stage
// 3; at stage 3 a shard each, gathered unit by unit, and with offload_param
// that shard in host memory or a file); in NF4 (model.lora.base_quant) every
// rank holds all of them, a quarter of bf16's bytes.
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
  // What create() allocates for rank `rank` of `world_size`, on plan's
  // device, in phase kFrozenWeights: it is built after the rest.
  static void plan(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size, int rank,
                   MemoryPlan& plan);
  ~FrozenWeights();

  WeightSource& weights() { return nf4_ ? static_cast<WeightSource&>(*nf4_) : params_->weights(); }

 private:
  FrozenWeights(const GptLayout& layout, const ZeroSettings& settings, Communicator& comm, Device& device,
                Kernels& kernels);
  // plan() as the parts state it, in their build phase.
  static void plan_build(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size, int rank,
                         MemoryPlan& plan);
  // Writes this rank's part from `init` and publishes it.
  absl::Status fill(const ParamInit& init);

  CpuDevice host_;
  std::unique_ptr<Kernels> host_kernels_;
  ZeroContext ctx_;
  std::unique_ptr<ParamStore> params_;
  std::optional<Nf4Weights> nf4_;
};

}  // namespace zerod
