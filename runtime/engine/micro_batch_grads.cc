#include "runtime/engine/micro_batch_grads.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/core/node_memory.h"
#include "shard/zero_engine.h"

namespace zerod {
namespace {

// The stores the ZeRO engine would choose for `cfg` on `device`.
StoreChoice stores_for(const JobConfig& cfg, const PlanDevice& device) {
  return choose_stores(planned_zero_settings(cfg, DType::kF32), device);
}

// How the resolved micro_batch_grads moves a step's micro-batches on
// `device`, for the banner; "" where it is adding each in fp32 in memory.
std::string micro_batch_flow(const JobConfig& cfg, const PlanDevice& device) {
  const StoreChoice c = stores_for(cfg, device);
  if (cfg.zero.stage < 2 || (!c.optimizer_on_host && c.sums.rounded == DType::kF32)) return "";
  const std::string type = c.sums.rounded == DType::kF32 ? "fp32" : dtype_name(c.sums.rounded);
  if (!c.optimizer_on_host) return absl::StrCat("rounded to ", type, " each micro-batch, summed in fp32");
  // What becomes of a sum kept on the device.
  const std::string once = c.updates_on_device ? "updated there (its masters and states copied up and back)"
                                               : "sent to the host once a step";
  if (c.sums.device_bytes == MicroBatchSums::kAll) return absl::StrCat("summed in fp32 on the device, ", once);
  // Where a sum on the host is updated.
  const std::string shared = c.updates_on_device ? ", each updated there or on the device (its sum copied up too), "
                                                   "whichever is planned to finish first"
                                                 : "";
  if (gradient_passes(cfg) == 1) return absl::StrCat("sent to the host in ", type, " once a step", shared);
  const std::string sent =
      absl::StrCat("sent to the host in ", type, ", summed there in fp32",
                   c.sums.fold > 1 ? absl::StrCat(", ", c.sums.fold, " micro-batches a pass") : "", shared);
  if (c.sums.device_bytes == 0) return absl::StrCat("each micro-batch's ", sent);
  return absl::StrCat("each micro-batch's rounded to ", type,
                      "; the first units' (the embeddings, then layers) fp32 sums that fit in ",
                      byte_size_text(c.sums.device_bytes), " summed on the device, ", once, "; the others' ", sent);
}

}  // namespace

std::string MicroBatchGradsChoice::line() const {
  if (what.empty()) return "";
  return absl::StrCat("micro-batch gradients (micro_batch_grads ", micro_batch_grads_name(mode), "): ", what,
                      why.empty() ? "" : absl::StrCat(" | auto: ", why));
}

namespace {

// The GPU memory "auto" plans against: run.gpu_memory_limit, or what the
// device holds (`device_free`); 0 where neither is known.
struct GpuLimit {
  uint64_t bytes = 0;
  std::string text;
  bool device_free = true;
};
GpuLimit gpu_limit(const JobConfig& cfg, const PlanDevice& device) {
  GpuLimit l{device.usable_bytes, absl::StrCat("the ", byte_size_text(device.usable_bytes), " the GPU holds")};
  if (const std::optional<uint64_t>& job = cfg.run.gpu_memory_limit;
      job && *job > 0 && (l.bytes == 0 || *job <= l.bytes)) {
    l = {*job, absl::StrCat("run.gpu_memory_limit ", byte_size_text(*job)), false};
  }
  return l;
}

// Each rank's plan of cfg, its peaks given to `see`.
absl::Status each_rank_peaks(const JobConfig& cfg, int world_size, const KernelMemory& kernels,
                             const PlanDevice& device, Trainer::ResumeFrom resume,
                             const std::function<void(const MemoryPeaks&)>& see) {
  for (int rank = 0; rank < world_size; ++rank) {
    MemoryPlan plan(device);
    ZEROD_RETURN_IF_ERROR(Trainer::plan(cfg, world_size, rank, kernels, plan, resume));
    see(plan.peaks());
  }
  return absl::OkStatus();
}

// The GPU's peak over the ranks of cfg's plan, and its gradients' peak.
absl::StatusOr<std::pair<uint64_t, uint64_t>> gpu_peaks(const JobConfig& cfg, int world_size,
                                                        const KernelMemory& kernels, const PlanDevice& device,
                                                        Trainer::ResumeFrom resume) {
  const int gpu = static_cast<int>(Tier::kGpu);
  uint64_t total = 0, grads = 0;
  ZEROD_RETURN_IF_ERROR(each_rank_peaks(cfg, world_size, kernels, device, resume, [&](const MemoryPeaks& p) {
    grads = std::max(grads, p.peak[gpu][static_cast<int>(Category::kGrads)]);
    total = std::max(total, p.total[gpu]);
  }));
  return std::pair{total, grads};
}

// Micro-batches "auto" has the host hold and add in one pass
// (MicroBatchSums::fold), with `cfg`'s sums on the device: four, else two,
// where every rank's host memory (host and pinned peaks) with them held
// stays within run.host_memory_limit, or else half the node's memory (the
// described machine's, or this one's: node_memory) shared by the world's ranks; 1 where
// neither does.
absl::StatusOr<int> host_fold(JobConfig cfg, int world_size, const KernelMemory& kernels, const PlanDevice& device,
                              Trainer::ResumeFrom resume) {
  uint64_t room = cfg.run.host_memory_limit.value_or(0);
  if (room == 0) {
    const uint64_t node = device.host_memory > 0 ? device.host_memory : node_memory().bytes;
    if (node == 0) return 1;
    room = node / 2 / static_cast<uint64_t>(world_size);
  }
  // Four (or the step's micro-batches, where fewer), then two.
  for (int fold = std::min(gradient_passes(cfg), 4); fold > 1; fold = fold > 2 ? 2 : 1) {
    cfg.zero.compute_host_fold = fold;
    uint64_t most = 0;
    ZEROD_RETURN_IF_ERROR(each_rank_peaks(cfg, world_size, kernels, device, resume, [&](const MemoryPeaks& p) {
      most = std::max(most, p.host_total());
    }));
    if (most <= room) return fold;
  }
  return 1;
}

MicroBatchGradsChoice choice_of(const JobConfig& cfg, const PlanDevice& device, MicroBatchGrads mode, std::string why,
                                uint64_t on_device = 0, int host_fold = 1) {
  MicroBatchGradsChoice c{mode, on_device, "", std::move(why), host_fold};
  JobConfig resolved = cfg;
  c.apply(resolved.zero);
  c.what = micro_batch_flow(resolved, device);
  return c;
}

// Whether "fp32" would keep the step's sum on the GPU: the optimizer
// offloaded from a GPU, several micro-batches a step.
bool sums_on_gpu(const JobConfig& cfg, const PlanDevice& device) {
  JobConfig summed = cfg;
  summed.zero.micro_batch_grads = MicroBatchGrads::kF32;
  return stores_for(summed, device).sums.device_bytes != 0;
}

}  // namespace

namespace {

// Bytes a step moves over the link (or the network) in micro-batch order
// that layer order does not: a layer's weights fetched again for each
// micro-batch past the first, going up and coming down (offloaded, or
// gathered from the ranks), and, where each micro-batch's gradients leave
// a GPU for an offloaded optimizer in 16 bits, all of them but one fp32
// sum; with `why`, what they are. The weights at the size they are held in
// (a QLoRA base's 4.5 bits a weight, block scales included).
struct Saving {
  uint64_t bytes = 0;
  std::string why;
};
absl::StatusOr<Saving> layer_saving(const JobConfig& cfg, int world_size, const KernelMemory& kernels,
                                    const PlanDevice& device, Trainer::ResumeFrom resume) {
  const ZeroConfig& z = cfg.zero;
  const uint64_t extra = static_cast<uint64_t>(cfg.grad_accum - 1);
  const double params = static_cast<double>(gpt_param_count(cfg.model));
  const double weight = cfg.lora && cfg.lora->nf4_base ? 4.5 / 8 : static_cast<double>(dtype_size(cfg.precision));
  const uint64_t weights = static_cast<uint64_t>(params * weight);
  if (z.offload_param.device != OffloadDevice::kNone || (z.stage == 3 && world_size > 1)) {
    const char* fetched = z.offload_param.device != OffloadDevice::kNone ? "uploads" : "gathers";
    return Saving{2 * extra * weights, absl::StrCat("each micro-batch ", fetched, " every layer again")};
  }
  if (device.memory != Tier::kGpu || z.stage < 2 || z.offload_optimizer.device == OffloadDevice::kNone) return Saving{};
  JobConfig passes = cfg;
  passes.zero.accumulation = Accumulation::kMicroBatch;
  ZEROD_ASSIGN_OR_RETURN(const MicroBatchGradsChoice grads,
                         resolve_micro_batch_grads(passes, world_size, kernels, device, resume));
  if (grads.mode != MicroBatchGrads::kCompute || cfg.lora) return Saving{};
  // Of the rank's shard (1/world of them), those not summed on the GPU.
  const double shard = params / world_size;
  const double sent = std::max(0.0, shard - static_cast<double>(grads.sums_on_device_bytes) / 4);
  const double micro = static_cast<double>(cfg.grad_accum);
  return Saving{static_cast<uint64_t>(std::max(0.0, (2 * micro - 4) * sent)),
                "each micro-batch's gradients would leave the GPU in 16 bits"};
}

}  // namespace

absl::StatusOr<AccumulationChoice> resolve_accumulation(const JobConfig& cfg, int world_size,
                                                        const KernelMemory& kernels, const PlanDevice& device,
                                                        Trainer::ResumeFrom resume) {
  if (cfg.zero.accumulation != Accumulation::kAuto) return AccumulationChoice{cfg.zero.accumulation, ""};
  const auto micro_batch = [](std::string why) {
    return AccumulationChoice{Accumulation::kMicroBatch, std::move(why)};
  };
  if (cfg.grad_accum == 1) return micro_batch("a step has one micro-batch");
  if (!cfg.activation_checkpointing) {
    return micro_batch("layer by layer keeps every micro-batch's block inputs: it needs activation checkpointing");
  }
  ZEROD_ASSIGN_OR_RETURN(const Saving saving, layer_saving(cfg, world_size, kernels, device, resume));
  if (saving.bytes == 0) return micro_batch("each micro-batch finds every layer and leaves its gradients in place");
  const std::string saved =
      absl::StrCat(saving.why, ": layer by layer moves ", byte_size_text(saving.bytes), " less a step");
  JobConfig layered = cfg;
  layered.zero.accumulation = Accumulation::kLayer;
  const GpuLimit limit = gpu_limit(cfg, device);
  if (device.memory != Tier::kGpu || limit.bytes == 0) return AccumulationChoice{Accumulation::kLayer, saved};
  ZEROD_ASSIGN_OR_RETURN(const auto peaks, gpu_peaks(layered, world_size, kernels, device, resume));
  const std::string kept =
      absl::StrCat("the ", cfg.grad_accum, " micro-batches' block inputs take a rank to ", byte_size_text(peaks.first));
  if (peaks.first <= limit.bytes) {
    return AccumulationChoice{Accumulation::kLayer, absl::StrCat(saved, "; ", kept, ", within ", limit.text)};
  }
  const std::string over = absl::StrCat(kept, ", over ", limit.text);
  if (cfg.cpu_checkpointing) return micro_batch(absl::StrCat(saved, ", but ", over));
  // In pinned host memory they cross the link three times (written, read
  // going up, read again for the recompute), where micro-batches in turn
  // keep one's on the GPU.
  layered.cpu_checkpointing = true;
  ZEROD_ASSIGN_OR_RETURN(const auto hosted, gpu_peaks(layered, world_size, kernels, device, resume));
  const GptConfig& m = cfg.model;
  const uint64_t inputs = static_cast<uint64_t>(cfg.grad_accum) * (m.n_layer + 1) * cfg.micro_batch * cfg.data.seq_len *
                          m.n_embd * dtype_size(cfg.precision);
  if (hosted.first > limit.bytes || 3 * inputs >= saving.bytes) {
    return micro_batch(absl::StrCat(saved, ", but ", over, "; in host memory they would take ",
                                    byte_size_text(hosted.first), " and move ", byte_size_text(3 * inputs)));
  }
  return AccumulationChoice{
      Accumulation::kLayer,
      absl::StrCat(saved, "; ", over, ": in pinned host memory, moving ", byte_size_text(3 * inputs),
                   " a step, a rank takes ", byte_size_text(hosted.first)),
      /*checkpoints_on_host=*/true};
}

absl::StatusOr<MicroBatchGradsChoice> resolve_micro_batch_grads(const JobConfig& cfg, int world_size,
                                                                const KernelMemory& kernels, const PlanDevice& device,
                                                                Trainer::ResumeFrom resume) {
  const ZeroConfig& z = cfg.zero;
  if (z.micro_batch_grads != MicroBatchGrads::kAuto) return choice_of(cfg, device, z.micro_batch_grads, "");
  // Only where "fp32" would keep a sum on the GPU is there a choice.
  if (!sums_on_gpu(cfg, device)) return choice_of(cfg, device, MicroBatchGrads::kF32, "");
  const GpuLimit limit = gpu_limit(cfg, device);
  JobConfig summed = cfg;
  summed.zero.micro_batch_grads = MicroBatchGrads::kF32;
  ZEROD_ASSIGN_OR_RETURN(const auto whole, gpu_peaks(summed, world_size, kernels, device, resume));
  const auto [most, sum_bytes] = whole;
  const std::string sum = absl::StrCat("the step's gradient sum on the GPU (", byte_size_text(sum_bytes),
                                       ") takes a rank to ", byte_size_text(most));
  if (limit.bytes == 0) return choice_of(cfg, device, MicroBatchGrads::kF32, sum);
  if (most <= limit.bytes)
    return choice_of(cfg, device, MicroBatchGrads::kF32, absl::StrCat(sum, ", within ", limit.text));
  return choose_compute_grads(cfg, world_size, kernels, device, resume, absl::StrCat(sum, ", over ", limit.text));
}

absl::StatusOr<MicroBatchGradsChoice> choose_compute_grads(const JobConfig& cfg, int world_size,
                                                           const KernelMemory& kernels, const PlanDevice& device,
                                                           Trainer::ResumeFrom resume, std::string why) {
  JobConfig sent = cfg;
  sent.zero.micro_batch_grads = MicroBatchGrads::kCompute;
  sent.zero.compute_sums_on_device_bytes = 0;
  const GpuLimit limit = gpu_limit(cfg, device);
  if (limit.bytes == 0 || !sums_on_gpu(cfg, device)) return choice_of(sent, device, MicroBatchGrads::kCompute, why);
  // What the limit leaves beside "compute"'s plan keeps the first units'
  // sums on the GPU. The sum's buffer adds to every phase's peak, so one
  // correction by what a try is over is enough (a few allowed). What the
  // device holds keeps a twentieth free: memory the plan does not count
  // (NCCL's, the libraries' own) needs room.
  const uint64_t target = limit.device_free ? limit.bytes - limit.bytes / 20 : limit.bytes;
  ZEROD_ASSIGN_OR_RETURN(const auto base, gpu_peaks(sent, world_size, kernels, device, resume));
  uint64_t keep = base.first < target ? target - base.first : 0;
  for (int tries = 0; keep > 0; ++tries) {
    sent.zero.compute_sums_on_device_bytes = keep;
    ZEROD_ASSIGN_OR_RETURN(const auto tried, gpu_peaks(sent, world_size, kernels, device, resume));
    if (tried.first <= target) {
      if (tried.second == 0) keep = 0;  // not even the first unit's sum fits
      break;
    }
    const uint64_t over = tried.first - target;
    keep = tries < 3 && over < keep ? keep - over : 0;
  }
  sent.zero.compute_sums_on_device_bytes = keep;
  ZEROD_ASSIGN_OR_RETURN(const int fold, host_fold(sent, world_size, kernels, device, resume));
  return choice_of(sent, device, MicroBatchGrads::kCompute, std::move(why), keep, fold);
}

}  // namespace zerod
