// What the ZeRO engine is told (DeepSpeed's zero_optimization section, as
// the job config reads it): the stage, buckets, prefetch and the offload
// tiers. Owned here so that shard/ needs none of the rest of the job config.
#pragma once

#include <cstdint>

#include "offload/offload_config.h"

namespace zerod {

// How each micro-batch's reduced gradients join the step's fp32 sum at
// stages 2 and 3 (zerod's key zero_optimization.micro_batch_grads):
//   kF32: added as they are; with the optimizer offloaded the sum is kept
//     on the GPU and leaves it once a step;
//   kCompute: rounded to the run's 16-bit type first; with the optimizer
//     offloaded each micro-batch's leaves the GPU in 16 bits and is summed
//     on the host, but for the first units (the embeddings, then layers)
//     whose fp32 sums fit in
//     compute_sums_on_device_bytes: those are summed on the GPU and leave
//     it once a step;
//   kAuto: kF32, unless the optimizer is offloaded, a step has several
//     micro-batches and the GPU sum does not fit the GPU: then kCompute,
//     with what the GPU has left for sums (Trainer resolves it before
//     anything is built).
enum class MicroBatchGrads { kAuto, kF32, kCompute };

// The order of a step's micro-batches (zerod's key
// zero_optimization.accumulation):
//   kMicroBatch: each micro-batch forward and backward through every layer
//     in turn, its gradients handed to the stores as its backward ends;
//   kLayer: each layer forward, and later backward, for every micro-batch
//     in turn while its weights are there, so that they are gathered or
//     uploaded once a step rather than once a micro-batch; a layer's
//     gradients of the whole step reach the stores once, summed on the
//     device. Each micro-batch's block inputs are kept (checkpointing);
//   kAuto: kLayer where it lowers a step's traffic and fits, else
//     kMicroBatch (Trainer resolves it before anything is built).
enum class Accumulation { kMicroBatch, kLayer, kAuto };

struct ZeroConfig {
  int stage = 0;
  int64_t reduce_bucket_size = 500000000;
  bool overlap_comm = true;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t sub_group_size = 1000000000;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param{OffloadDevice::kNone, std::nullopt, true, 5};
  MicroBatchGrads micro_batch_grads = MicroBatchGrads::kAuto;
  Accumulation accumulation = Accumulation::kMicroBatch;
  // Set where "auto" resolves to kCompute, never read from a config; the
  // second: micro-batches added on the host in one pass
  // (MicroBatchSums::fold).
  uint64_t compute_sums_on_device_bytes = 0;
  int compute_host_fold = 1;
};

}  // namespace zerod
