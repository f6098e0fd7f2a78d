#include "runtime/engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/adam.h"
#include "runtime/kernels/profiled_kernels.h"
#include "runtime/optim/lr_schedule.h"

namespace zerod {

Trainer::Trainer(const JobConfig& cfg, Communicator* comm, Device* device, TrainerEnv env)
    : cfg_(cfg), env_(std::move(env)), comm_(comm), device_(device), scaler_(cfg.fp16), sample_rng_state_(cfg.run.seed) {
  if (!comm_) {
    own_comm_ = make_local_communicator();
    comm_ = own_comm_.get();
  }
}

namespace {

// Clipping or a loss scale: an update's gradient factor is known only once
// every gradient is.
bool factor_after_backward(const JobConfig& cfg) { return cfg.gradient_clipping > 0 || cfg.precision == DType::kF16; }

// Each of the host's token id buffers (inputs, targets): a step's, every
// micro-batch's apart, as a step on the stream reads them all before the
// host waits.
uint64_t token_bytes(const JobConfig& cfg) {
  return uint64_t(cfg.grad_accum) * cfg.micro_batch * cfg.data.seq_len * 4;
}

}  // namespace

absl::StatusOr<ZeroSettings> zero_settings(const JobConfig& cfg, const GptLayout& layout, IoFaultHook io_faults) {
  const std::optional<std::string>& from = layout.lora() ? cfg.lora->init_from : cfg.init_from;
  ZEROD_ASSIGN_OR_RETURN(ParamInit init, initial_params(layout, cfg.run.seed, from));
  return ZeroSettings{cfg.zero,
                      cfg.optimizer,
                      cfg.precision,
                      {cfg.aio_block_size, cfg.aio_queue_depth},
                      std::move(init),
                      std::move(io_faults),
                      factor_after_backward(cfg),
                      DType::kF32,
                      cfg.grad_accum};
}

namespace {

// The ZeRO engine's settings for planning `cfg` (no initial values), with
// the kernel table's operand type `operands`.
ZeroSettings planned_settings(const JobConfig& cfg, DType operands) {
  return {cfg.zero, cfg.optimizer, cfg.precision, {}, nullptr, {}, factor_after_backward(cfg), operands,
          cfg.grad_accum};
}

// The stores the ZeRO engine would choose for `cfg` on `device`.
StoreChoice stores_for(const JobConfig& cfg, const PlanDevice& device) {
  return choose_stores(planned_settings(cfg, DType::kF32), device);
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
  if (cfg.grad_accum == 1) return absl::StrCat("sent to the host in ", type, " once a step", shared);
  const std::string sent =
      absl::StrCat("sent to the host in ", type, ", summed there in fp32",
                   c.sums.fold > 1 ? absl::StrCat(", ", c.sums.fold, " micro-batches a pass") : "", shared);
  if (c.sums.device_bytes == 0) return absl::StrCat("each micro-batch's ", sent);
  return absl::StrCat("each micro-batch's rounded to ", type,
                      "; the first units' (the embeddings, then layers) fp32 sums that fit in ",
                      byte_size_text(c.sums.device_bytes), " summed on the device, ", once, "; the others' ", sent);
}

}  // namespace

std::string Trainer::MicroBatchGradsChoice::line() const {
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
// described machine's, or this one's) shared by the world's ranks; 1 where
// neither does.
absl::StatusOr<int> host_fold(JobConfig cfg, int world_size, const KernelMemory& kernels, const PlanDevice& device,
                              Trainer::ResumeFrom resume) {
  uint64_t room = cfg.run.host_memory_limit.value_or(0);
  if (room == 0) {
    uint64_t node = device.host_memory;
    if (node == 0) {
      const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      if (pages <= 0 || page <= 0) return 1;
      node = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    }
    room = node / 2 / static_cast<uint64_t>(world_size);
  }
  // Four (or the step's micro-batches, where fewer), then two.
  for (int fold = std::min(cfg.grad_accum, 4); fold > 1; fold = fold > 2 ? 2 : 1) {
    cfg.zero.compute_host_fold = fold;
    uint64_t most = 0;
    ZEROD_RETURN_IF_ERROR(each_rank_peaks(cfg, world_size, kernels, device, resume, [&](const MemoryPeaks& p) {
      most = std::max(most, p.total[static_cast<int>(Tier::kHost)] + p.total[static_cast<int>(Tier::kPinned)]);
    }));
    if (most <= room) return fold;
  }
  return 1;
}

Trainer::MicroBatchGradsChoice choice_of(const JobConfig& cfg, const PlanDevice& device, MicroBatchGrads mode,
                                         std::string why, uint64_t on_device = 0, int host_fold = 1) {
  Trainer::MicroBatchGradsChoice c{mode, on_device, "", std::move(why), host_fold};
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

absl::StatusOr<Trainer::MicroBatchGradsChoice> Trainer::micro_batch_grads(const JobConfig& cfg, int world_size,
                                                                          const KernelMemory& kernels,
                                                                          const PlanDevice& device,
                                                                          ResumeFrom resume) {
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
  if (most <= limit.bytes) return choice_of(cfg, device, MicroBatchGrads::kF32, absl::StrCat(sum, ", within ", limit.text));
  return compute_grads(cfg, world_size, kernels, device, resume, absl::StrCat(sum, ", over ", limit.text));
}

absl::StatusOr<Trainer::MicroBatchGradsChoice> Trainer::compute_grads(const JobConfig& cfg, int world_size,
                                                                      const KernelMemory& kernels,
                                                                      const PlanDevice& device, ResumeFrom resume,
                                                                      std::string why) {
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

absl::Status Trainer::plan(const JobConfig& cfg, int world_size, int rank, const KernelMemory& kernels,
                           MemoryPlan& plan, ResumeFrom resume) {
  if (cfg.zero.micro_batch_grads == MicroBatchGrads::kAuto) {
    JobConfig resolved = cfg;
    ZEROD_ASSIGN_OR_RETURN(const MicroBatchGradsChoice c,
                           micro_batch_grads(cfg, world_size, kernels, plan.device(), resume));
    c.apply(resolved.zero);
    return Trainer::plan(resolved, world_size, rank, kernels, plan, resume);
  }
  // In build()'s order.
  kernels.plan_table(plan);
  plan.add("token ids", plan.device().staging_tier(), Category::kWorkspace, token_bytes(cfg), Phase::kBuild, true, 2);
  DataLoader::plan(cfg.data, plan);
  const LoraConfig* lora = cfg.lora ? &cfg.lora->adapters : nullptr;
  Gpt::plan(cfg.model, cfg.micro_batch, cfg.data.seq_len, cfg.precision, cfg.activation_checkpointing,
            cfg.cpu_checkpointing, kernels, plan, lora, cfg.grad_accum);
  const GptLayout model(cfg.model);
  const ZeroSettings zs = planned_settings(cfg, kernels.operand_type(cfg.precision));
  if (lora) FrozenWeights::plan(model, zs, cfg.lora->nf4_base, world_size, rank, plan);
  const GptLayout layout = lora ? GptLayout::adapters(cfg.model, *lora) : model;
  const ZeroShape shape(layout, cfg.zero.stage, world_size, rank, cfg.precision);
  // A rank saves its shard (rank 0 alone under stage 0) when the job saves.
  const CheckpointConfig& c = cfg.run.checkpoint;
  const bool saves = c.dir && rank < shape.part.world_size();
  ZeroEngine::plan(layout, zs, world_size, rank, saves, plan);
  if (resume != ResumeFrom::kNothing) {
    ZeroEngine::plan_resume(shape, cfg.optimizer, resume == ResumeFrom::kOtherPartition, plan);
  }
  // A save in the background copies the shard to a buffer kept for the
  // later saves, when the states are in memory and the buffer fits.
  if (saves && c.async && cfg.zero.offload_optimizer.device != OffloadDevice::kNvme) {
    ZEROD_ASSIGN_OR_RETURN(const uint64_t bytes, ZeroEngine::shard_file_bytes(shape, cfg.optimizer));
    const uint64_t limit = cfg.run.host_memory_limit.value_or(0);
    if (limit == 0 || plan.held(Phase::kTraining).total[static_cast<int>(Tier::kHost)] + bytes <= limit) {
      plan.add("checkpoint staging", Tier::kHost, Category::kWorkspace, bytes, Phase::kCheckpoint);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const JobConfig& cfg, Communicator* comm, Device* device,
                                                         TrainerEnv env) {
  std::unique_ptr<Trainer> t(new Trainer(cfg, comm, device, std::move(env)));
  ZEROD_RETURN_IF_ERROR(t->build());
  return t;
}

absl::Status Trainer::build() {
  if (!device_) {
    ZEROD_ASSIGN_OR_RETURN(own_device_, open_device(cfg_.run.device));
    device_ = own_device_.get();
  }
  ZEROD_ASSIGN_OR_RETURN(kernels_, kernels_for(*device_, cfg_.precision));
  if (cfg_.zero.micro_batch_grads == MicroBatchGrads::kAuto) {
    ZEROD_ASSIGN_OR_RETURN(const MicroBatchGradsChoice c, micro_batch_grads(cfg_, comm_->world_size(),
                                                                            kernels_->memory(), plan_device(*device_)));
    c.apply(cfg_.zero);
  }
  if (cfg_.wall_clock_breakdown) {
    profiler_ = std::make_unique<Profiler>(*device_);
    device_->set_profiler(profiler_.get());
    kernels_ = profiled_kernels(std::move(kernels_), *profiler_);
  }
  // The host's token ids first (plan() follows this order); pinned on a
  // GPU, so that copying them stops neither the host nor the stream.
  const Tier staging = staging_tier(*device_);
  ZEROD_ASSIGN_OR_RETURN(inputs_, device_->allocate(token_bytes(cfg_), Category::kWorkspace, staging));
  ZEROD_ASSIGN_OR_RETURN(targets_, device_->allocate(token_bytes(cfg_), Category::kWorkspace, staging));
  ZEROD_ASSIGN_OR_RETURN(data_, load_dataset(cfg_.data, cfg_.model.vocab_size));
  ZEROD_ASSIGN_OR_RETURN(DataLoader loader,
                         DataLoader::create(&data_.tokens, cfg_.data.seq_len, cfg_.data.seed, comm_->rank(),
                                            comm_->world_size(), device_->accountant(), data_.windowed));
  loader_ = std::make_unique<DataLoader>(std::move(loader));
  const LoraConfig* lora = cfg_.lora ? &cfg_.lora->adapters : nullptr;
  ZEROD_ASSIGN_OR_RETURN(model_, Gpt::create(cfg_.model, cfg_.micro_batch, cfg_.data.seq_len, cfg_.precision,
                                             cfg_.activation_checkpointing, *device_, *kernels_,
                                             cfg_.cpu_checkpointing, lora, cfg_.grad_accum));
  if (lora) adapters_ = std::make_unique<GptLayout>(GptLayout::adapters(cfg_.model, *lora));
  ZEROD_ASSIGN_OR_RETURN(ZeroSettings zs, zero_settings(cfg_, layout(), env_.io_faults));
  zs.operands = kernels_->operand_type();
  ZEROD_ASSIGN_OR_RETURN(zero_, ZeroEngine::create(layout(), zs, *comm_, *device_, *kernels_));
  if (lora) {
    // Last: its host buffers of initial values are the build's only ones
    // freed before the run, so the plan's build phase (which holds them
    // with everything kept) is what the run's peak is.
    ZEROD_ASSIGN_OR_RETURN(ZeroSettings base, zero_settings(cfg_, model_->layout(), env_.io_faults));
    base.operands = kernels_->operand_type();
    ZEROD_ASSIGN_OR_RETURN(base_, FrozenWeights::create(model_->layout(), base, cfg_.lora->nf4_base, *comm_,
                                                        *device_, *kernels_));
    adapted_ = std::make_unique<AdaptedWeights>(base_->weights(), zero_->weights());
  }
  return absl::OkStatus();
}

Trainer::~Trainer() {
  // A device given to the trainer outlives it and its profiler.
  if (profiler_) device_->set_profiler(nullptr);
}

absl::StatusOr<StepResult> Trainer::step() {
  absl::StatusOr<StepResult> r;
  const Device::HostWaits before = device_->host_waits();
  {
    auto span = Profiler::host_span(profiler_.get(), "step");
    r = train_step();
  }
  if (r.ok() && profiler_) {
    // Where the step's threads stopped for the device (the breakdown's
    // collect, which waits for its timing events, comes after).
    const Device::HostWaits after = device_->host_waits();
    profiler_->add_host("waiting for the device", (after.seconds - before.seconds) * 1e3,
                        static_cast<int64_t>(after.count - before.count));
    ZEROD_RETURN_IF_ERROR(profiler_->collect());
  }
  return r;
}

absl::StatusOr<StepResult> Trainer::train_step() {
  const int B = cfg_.micro_batch, T = cfg_.data.seq_len, accum = cfg_.grad_accum;
  const int world = comm_->world_size();
  const bool fp16 = cfg_.precision == DType::kF16;
  const double scale = fp16 ? scaler_.scale() : 1.0;
  zero_->zero_grads();

  StepResult r;
  r.step = ++steps_;
  r.loss_scale = scale;
  const int64_t tokens = int64_t(B) * T;
  int64_t targets_in_step = 0;  // all ranks', all micro-batches'
  for (int micro = 0; micro < accum; ++micro) {
    targets_in_step += loader_->next_batch(B, inputs_.host<int32_t>() + micro * tokens,
                                           targets_.host<int32_t>() + micro * tokens);
  }
  // Each rank's gradients carry 1/(accum * world) so that their sum over
  // ranks is the mean over the global batch; with a loss mask, the mean is
  // over the targets it counts (a pass's gradient is of its mean over B*T).
  const double counted = static_cast<double>(std::max<int64_t>(targets_in_step, 1));
  const double mean_over = loader_->windowed() ? counted / double(tokens) : double(accum) * world;
  const auto grad_scale = static_cast<float>(scale / mean_over);
  // The host can update each unit as the last micro-batch's backward
  // completes it, with the factor of a step that neither clips nor
  // overflows (exact without clipping or a loss scale; undone otherwise).
  if (zero_->updates_during_backward()) {
    zero_->update_during_backward(static_cast<float>(lr_at(cfg_.scheduler, cfg_.optimizer.lr, updates_)), updates_ + 1,
                                  accum, static_cast<float>(1.0 / scale));
  }
  // A step on the device's stream (a world of one at stage 0) is waited
  // for once, at its end, for its losses and its gradients' norm; any
  // other waits for each pass, whose gradients its stores take on the host.
  const bool on_stream = zero_->steps_on_stream();
  Stream& stream = device_->compute_stream();
  for (int micro = 0; micro < accum; ++micro) {
    const int32_t* inputs = inputs_.host<int32_t>() + micro * tokens;
    const int32_t* targets = targets_.host<int32_t>() + micro * tokens;
    ZEROD_RETURN_IF_ERROR(model_->enqueue_forward_backward(
        weights(), zero_->grads(), inputs, targets, B, T, grad_scale,
        lora_pass_seed(cfg_.run.seed, r.step, micro, comm_->rank()), micro));
    if (!on_stream) ZEROD_RETURN_IF_ERROR(device_->synchronize(stream));
  }
  const double lr = lr_at(cfg_.scheduler, cfg_.optimizer.lr, updates_);
  double sumsq = 0.0;
  if (on_stream) {
    absl::Status enqueued = zero_->enqueue_step(static_cast<float>(lr), updates_ + 1, scale, cfg_.gradient_clipping);
    // Also after a failure: the stream may still read the step's tokens.
    enqueued.Update(device_->synchronize(stream));
    ZEROD_RETURN_IF_ERROR(enqueued);
    // Not finite exactly where the update's factor was not (a loss scale
    // and a clip that are finite and not negative): the update skipped.
    sumsq = zero_->step_sum_squares();
  } else {
    ZEROD_RETURN_IF_ERROR(zero_->reduce_gradients());
  }
  double loss_sum = 0.0;
  for (int micro = 0; micro < accum; ++micro) loss_sum += model_->pass_loss(micro);
  ZEROD_RETURN_IF_ERROR(all_reduce(*comm_, &loss_sum, 1, CommType::kF64, ReduceOp::kSum));
  r.loss = loss_sum / mean_over;
  if (!on_stream) {
    ZEROD_ASSIGN_OR_RETURN(sumsq, zero_->grad_sum_squares());
  }

  if (!std::isfinite(sumsq)) {
    // The update on the stream skipped itself; one begun during backward
    // is undone; where it cannot be (no super_offload), the run fails here
    // anyway.
    const absl::Status undone = on_stream ? absl::OkStatus() : zero_->skip_optimizer();
    if (!fp16) {
      return absl::InternalError(absl::StrCat("gradients are not finite at step ", r.step, " (loss ", r.loss, ")"));
    }
    ZEROD_RETURN_IF_ERROR(undone);
    ZEROD_RETURN_IF_ERROR(scaler_.update(/*overflow=*/true));
    r.skipped = true;
    r.grad_norm = INFINITY;
    r.lr = last_lr_;
    return r;
  }
  r.grad_norm = std::sqrt(sumsq) / scale;
  r.lr = lr;
  ++updates_;
  if (!on_stream) {
    // One factor unscales and clips, as the stream's update computes it.
    const float factor = update_factor(sumsq, scale, cfg_.gradient_clipping);
    ZEROD_RETURN_IF_ERROR(zero_->apply_optimizer(static_cast<float>(lr), updates_, factor));
  }
  last_lr_ = r.lr;
  if (fp16) ZEROD_RETURN_IF_ERROR(scaler_.update(/*overflow=*/false));
  return r;
}

namespace {

// The next token from one row of logits: the largest at temperature 0, else
// drawn from softmax(logits / temperature) (the row is overwritten).
int32_t pick_token(float* logits, int V, double temperature, NormalRng& rng) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const float mx = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += (logits[v] = static_cast<float>(std::exp((logits[v] - mx) / temperature)));
  double u = rng.uniform() * sum;
  for (int v = 0; v < V; ++v) {
    u -= logits[v];
    if (u <= 0) return v;
  }
  return V - 1;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> Trainer::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                                    int max_new, double temperature, int stop) {
  const int V = cfg_.model.vocab_size, window = model_->max_seq();
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return absl::InvalidArgumentError("generate: an empty prompt");
    by_length[prompts[i].size()].push_back(i);
  }
  // One rng a prompt, drawn in the prompts' order whatever the batching.
  std::vector<NormalRng> rngs;
  for (size_t i = 0; i < prompts.size(); ++i) rngs.emplace_back(sample_rng_state_++);
  for (const auto& [length, ids] : by_length) {
    // As many rows a pass as the model holds tokens at the longest input.
    const int longest = static_cast<int>(std::min<int64_t>(int64_t(length) + max_new - 1, window));
    const size_t rows = static_cast<size_t>(std::max<int64_t>(1, model_->max_tokens() / longest));
    for (size_t first = 0; first < ids.size(); first += rows) {
      const int B = static_cast<int>(std::min(rows, ids.size() - first));
      std::vector<std::vector<int32_t>> seqs;
      for (int b = 0; b < B; ++b) seqs.push_back(prompts[ids[first + b]]);
      std::vector<int32_t> tokens;
      std::vector<float> logits(size_t(B) * V);
      for (int i = 0; i < max_new; ++i) {
        const int len = std::min<int>(static_cast<int>(length) + i, window);
        tokens.clear();
        for (const auto& s : seqs) tokens.insert(tokens.end(), s.end() - len, s.end());
        ZEROD_RETURN_IF_ERROR(model_->forward_logits(weights(), tokens.data(), B, len, logits.data(),
                                                     /*last_only=*/true));
        for (int b = 0; b < B; ++b) {
          seqs[b].push_back(pick_token(logits.data() + size_t(b) * V, V, temperature, rngs[ids[first + b]]));
        }
      }
      for (int b = 0; b < B; ++b) {
        std::vector<int32_t>& o = out[ids[first + b]];
        o.assign(seqs[b].begin() + static_cast<int64_t>(length), seqs[b].end());
        if (stop >= 0) {
          auto at = std::find(o.begin(), o.end(), stop);
          if (at != o.end()) o.erase(at + 1, o.end());
        }
      }
    }
  }
  return out;
}

namespace {

std::vector<int32_t> to_tokens(const std::string& s) {
  std::vector<int32_t> t;
  for (unsigned char ch : s) t.push_back(ch);
  return t;
}

std::string to_text(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s.push_back(t < 256 ? static_cast<char>(t) : '?');
  return s;
}

}  // namespace

absl::StatusOr<double> Trainer::synthetic_accuracy() {
  if (cfg_.data.kind != DataKind::kSynthetic || data_.heldout.empty()) return -1.0;
  // Every rank answers every prompt: the passes, batched, are few, every
  // rank makes the same ones (ZeRO-3 gathers are collective), and the
  // figure does not depend on the world size.
  std::vector<std::vector<int32_t>> prompts;
  size_t longest_answer = 0;
  for (const auto& [prompt, answer] : data_.heldout) {
    // A line starts after a newline in the training stream.
    prompts.push_back(to_tokens("\n" + prompt));
    longest_answer = std::max(longest_answer, answer.size());
  }
  ZEROD_ASSIGN_OR_RETURN(const auto got, generate(prompts, static_cast<int>(longest_answer) + 1, 0, '\n'));
  // Cut after its first newline, a row is right only if that newline ends
  // the answer: more tokens than its answer needs change nothing.
  int64_t correct = 0;
  for (size_t i = 0; i < got.size(); ++i) correct += to_text(got[i]) == data_.heldout[i].second + "\n";
  return static_cast<double>(correct) / static_cast<double>(got.size());
}

absl::StatusOr<std::string> Trainer::sample_text() {
  if (cfg_.run.sample_tokens == 0) return std::string();
  if (cfg_.data.kind == DataKind::kSynthetic) {
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < std::min<size_t>(4, data_.heldout.size()); ++i) {
      prompts.push_back(to_tokens("\n" + data_.heldout[i].first));
    }
    ZEROD_ASSIGN_OR_RETURN(const auto got, generate(prompts, 4, cfg_.run.sample_temperature, '\n'));
    std::string out;
    for (size_t i = 0; i < got.size(); ++i) absl::StrAppend(&out, data_.heldout[i].first, to_text(got[i]));
    return out;
  }
  if (cfg_.data.kind == DataKind::kText) {
    std::vector<uint32_t> ids(std::min<int64_t>(16, data_.tokens.size()));
    data_.tokens.read(0, static_cast<int64_t>(ids.size()), ids.data());
    const std::vector<int32_t> prompt(ids.begin(), ids.end());
    ZEROD_ASSIGN_OR_RETURN(const auto got, generate({prompt}, cfg_.run.sample_tokens, cfg_.run.sample_temperature));
    return to_text(prompt) + to_text(got[0]);
  }
  return std::string();
}

}  // namespace zerod
