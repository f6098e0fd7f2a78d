// How a step's micro-batches go, resolved for a job before anything is
// built, chosen from the job's memory plan where the config says "auto"
// (shard/zero_config.h): their order (zero_optimization.accumulation), and
// how each micro-batch's reduced gradients join the step's fp32 sum
// (zero_optimization.micro_batch_grads), decided in that order.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/job_config.h"
#include "runtime/core/memory_plan.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/kernel_memory.h"

namespace zerod {

// zero_optimization.accumulation as a job of `world_size` on `device` runs
// it, and for "auto" why (the banner's). "auto" is "layer" where a step has
// several micro-batches, activation checkpointing keeps its block inputs,
// layer order moves fewer bytes a step (each micro-batch would fetch every
// layer again: parameters offloaded, or gathered from the ranks at stage
// 3; on a GPU, each micro-batch's gradients would leave it in 16 bits for
// an offloaded optimizer), and every rank's plan of it fits its GPU
// (run.gpu_memory_limit, and what the device holds): with the block
// inputs on the GPU, or else in pinned host memory (cpu_checkpointing)
// where the bytes they then move are fewer than those saved. Else
// "micro_batch".
struct AccumulationChoice {
  Accumulation mode;
  std::string why;
  bool checkpoints_on_host = false;  // "auto" moved the block inputs to the host
  void apply(JobConfig& cfg) const {
    cfg.zero.accumulation = mode;
    cfg.accumulation_why = why;
    cfg.cpu_checkpointing = cfg.cpu_checkpointing || checkpoints_on_host;
  }
};
absl::StatusOr<AccumulationChoice> resolve_accumulation(const JobConfig& cfg, int world_size,
                                                        const KernelMemory& kernels, const PlanDevice& device,
                                                        Trainer::ResumeFrom resume = Trainer::ResumeFrom::kNothing);

// What a job of `world_size` on `device` runs with. `what` says how the
// micro-batches go, for the banner ("" where they are added in fp32 in
// memory); `why`, for "auto" on a GPU, what decided it.
struct MicroBatchGradsChoice {
  MicroBatchGrads mode;
  // kCompute: the bytes of the step's fp32 sum the GPU may keep (whole
  // units from the first fit in it; at least one where not 0).
  uint64_t sums_on_device_bytes = 0;
  std::string what, why;
  // kCompute: micro-batches added on the host in one pass (MicroBatchSums::fold).
  int host_fold = 1;
  // The choice into a config's zero_optimization.
  void apply(ZeroConfig& z) const {
    z.micro_batch_grads = mode;
    z.compute_sums_on_device_bytes = sums_on_device_bytes;
    z.compute_host_fold = host_fold;
  }
  // "micro-batch gradients (micro_batch_grads compute): <what> | auto:
  // <why>"; "" where `what` is.
  std::string line() const;
};

// The config's mode as it runs. "auto" is "fp32" unless the optimizer is
// offloaded (stage 2 or 3) from a GPU and a step has several micro-batches:
// then "fp32" (the step's sum kept on the GPU) where every rank's plan with
// it fits the GPU (run.gpu_memory_limit, and what the device holds), else
// choose_compute_grads().
absl::StatusOr<MicroBatchGradsChoice> resolve_micro_batch_grads(
    const JobConfig& cfg, int world_size, const KernelMemory& kernels, const PlanDevice& device,
    Trainer::ResumeFrom resume = Trainer::ResumeFrom::kNothing);

// "compute", with what the GPU has left beside its plan (within
// run.gpu_memory_limit, or a twentieth short of what the device holds)
// keeping the first units' sums there, where the optimizer is offloaded and
// a step has several micro-batches; `why` as given.
absl::StatusOr<MicroBatchGradsChoice> choose_compute_grads(const JobConfig& cfg, int world_size,
                                                           const KernelMemory& kernels, const PlanDevice& device,
                                                           Trainer::ResumeFrom resume, std::string why);

}  // namespace zerod
