// The trainer's build (in the order its plan lists) and its step: the
// micro-batches' forward and backward, the reduction, the clip and the
// update (trainer.h). Checkpoints are in trainer_checkpoint.cc, generation
// in trainer_generate.cc, the micro-batch gradients' choice in
// micro_batch_grads.cc.
#include "runtime/engine/trainer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/engine/micro_batch_grads.h"
#include "runtime/kernels/ops/adam.h"
#include "runtime/kernels/profiled_kernels.h"
#include "runtime/optim/lr_schedule.h"

namespace zerod {

Trainer::Trainer(const JobConfig& cfg, Communicator* comm, Device* device, TrainerEnv env)
    : cfg_(cfg),
      env_(std::move(env)),
      comm_(comm),
      device_(device),
      scaler_(cfg.fp16),
      sample_rng_state_(cfg.run.seed) {
  if (!comm_) {
    own_comm_ = make_local_communicator();
    comm_ = own_comm_.get();
  }
}

namespace {

// Clipping or a loss scale: an update's gradient factor is known only once
// every gradient is.
bool factor_after_backward(const JobConfig& cfg) { return cfg.gradient_clipping > 0 || cfg.precision == DType::kF16; }

// The host's token id buffers, inputs and targets: a step's, every
// micro-batch's apart, as a step on the stream reads them all before the
// host waits; in `staging` memory.
BufferSpec token_ids(const JobConfig& cfg, Tier staging) {
  return {"token ids", Category::kWorkspace, uint64_t(cfg.grad_accum) * cfg.micro_batch * cfg.data.seq_len * 4, 2,
          staging};
}
// Packed sequences' positions in their documents, as the ids.
BufferSpec token_positions(const JobConfig& cfg, Tier staging) {
  BufferSpec s = token_ids(cfg, staging);
  s.what = "token positions";
  s.count = 1;
  return s;
}

}  // namespace

absl::StatusOr<ZeroSettings> zero_settings(const JobConfig& cfg, const GptLayout& layout, IoFaultHook io_faults) {
  const std::optional<std::string>& from = layout.lora() ? cfg.lora->init_from : cfg.init_from;
  ZEROD_ASSIGN_OR_RETURN(ParamInit init, initial_params(layout, cfg.run.seed, from));
  Nf4ModuleReader nf4_held;  // a QLoRA base from a 4-bit model's files keeps their bits
  if (cfg.lora && cfg.lora->nf4_base) {
    ZEROD_ASSIGN_OR_RETURN(nf4_held, held_nf4_modules(layout, from));
  }
  return ZeroSettings{
      cfg.zero,        cfg.optimizer,       cfg.precision,        {cfg.aio_block_size, cfg.aio_queue_depth},
      std::move(init), std::move(nf4_held), std::move(io_faults), factor_after_backward(cfg),
      DType::kF32,     gradient_passes(cfg)};
}

ZeroSettings planned_zero_settings(const JobConfig& cfg, DType operands) {
  return {cfg.zero, cfg.optimizer,       cfg.precision, {}, nullptr, nullptr, {}, factor_after_backward(cfg),
          operands, gradient_passes(cfg)};
}

absl::Status Trainer::plan(const JobConfig& cfg, int world_size, int rank, const KernelMemory& kernels,
                           MemoryPlan& plan, ResumeFrom resume) {
  if (cfg.zero.accumulation == Accumulation::kAuto) {
    JobConfig resolved = cfg;
    ZEROD_ASSIGN_OR_RETURN(const AccumulationChoice a,
                           resolve_accumulation(cfg, world_size, kernels, plan.device(), resume));
    a.apply(resolved);
    return Trainer::plan(resolved, world_size, rank, kernels, plan, resume);
  }
  if (cfg.zero.micro_batch_grads == MicroBatchGrads::kAuto) {
    JobConfig resolved = cfg;
    ZEROD_ASSIGN_OR_RETURN(const MicroBatchGradsChoice c,
                           resolve_micro_batch_grads(cfg, world_size, kernels, plan.device(), resume));
    c.apply(resolved.zero);
    return Trainer::plan(resolved, world_size, rank, kernels, plan, resume);
  }
  // In build()'s order.
  plan.add(kernels.table_buffers());
  plan.add(token_ids(cfg, plan.device().staging_tier()));
  // Data that cannot be read here is counted unpacked (DataLoader::plan).
  const bool packed =
      dataset_packed(cfg.data).value_or(false) || (cfg.data.eval && EvalWindows::packed(cfg.data).value_or(false));
  if (packed) plan.add(token_positions(cfg, plan.device().staging_tier()));
  DataLoader::plan(cfg.data, plan);
  EvalWindows::plan(cfg.data, plan);
  const LoraConfig* lora = cfg.lora ? &cfg.lora->adapters : nullptr;
  Gpt::plan(cfg.model, cfg.micro_batch, cfg.data.seq_len, cfg.precision, cfg.activation_checkpointing,
            cfg.cpu_checkpointing, kernels, plan, lora, cfg.grad_accum, packed,
            cfg.zero.accumulation == Accumulation::kLayer);
  const GptLayout model(cfg.model);
  const ZeroSettings zs = planned_zero_settings(cfg, kernels.operand_type(cfg.precision));
  if (lora) {
    plan.add(FrozenWeights::buffers(model, zs, cfg.lora->nf4_base, world_size, rank, plan.device()),
             Phase::kFrozenWeights);
  }
  const GptLayout layout = lora ? GptLayout::adapters(cfg.model, *lora) : model;
  const ZeroShape shape(layout, cfg.zero.stage, world_size, rank, cfg.precision);
  // A rank saves its shard (rank 0 alone under stage 0) when the job saves.
  const CheckpointConfig& c = cfg.run.checkpoint;
  const bool saves = c.dir && rank < shape.part.world_size();
  ZeroEngine::plan(layout, zs, world_size, rank, saves, plan);
  if (resume != ResumeFrom::kNothing) {
    plan.add(ZeroEngine::resume_buffers(shape, cfg.optimizer, resume == ResumeFrom::kOtherPartition), Phase::kResume);
  }
  // A save in the background copies the shard to a buffer kept for the
  // later saves, when the states are in memory and the buffer fits (under
  // the host's limit, which holds its pinned memory too).
  if (saves && c.async && cfg.zero.offload_optimizer.device != OffloadDevice::kNvme) {
    ZEROD_ASSIGN_OR_RETURN(const uint64_t bytes, ZeroEngine::shard_file_bytes(shape, cfg.optimizer));
    const uint64_t limit = cfg.run.host_memory_limit.value_or(0);
    if (limit == 0 || plan.held(Phase::kTraining).host_total() + bytes <= limit) {
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
  if (cfg_.zero.accumulation == Accumulation::kAuto) {
    ZEROD_ASSIGN_OR_RETURN(const AccumulationChoice a,
                           resolve_accumulation(cfg_, comm_->world_size(), kernels_->memory(), plan_device(*device_)));
    a.apply(cfg_);
  }
  if (cfg_.zero.micro_batch_grads == MicroBatchGrads::kAuto) {
    ZEROD_ASSIGN_OR_RETURN(
        const MicroBatchGradsChoice c,
        resolve_micro_batch_grads(cfg_, comm_->world_size(), kernels_->memory(), plan_device(*device_)));
    c.apply(cfg_.zero);
  }
  if (cfg_.wall_clock_breakdown) {
    profiler_ = std::make_unique<Profiler>(*device_);
    device_->set_profiler(profiler_.get());
    kernels_ = profiled_kernels(std::move(kernels_), *profiler_);
  }
  // The host's token ids first (plan() follows this order); pinned on a
  // GPU, so that copying them stops neither the host nor the stream.
  const BufferSpec ids = token_ids(cfg_, staging_tier(*device_));
  ZEROD_ASSIGN_OR_RETURN(inputs_, allocate_spec(*device_, ids));
  ZEROD_ASSIGN_OR_RETURN(targets_, allocate_spec(*device_, ids));
  ZEROD_ASSIGN_OR_RETURN(data_, load_dataset(cfg_.data, cfg_.model.vocab_size));
  const std::optional<EvalDataConfig>& eval = cfg_.data.eval;
  if (eval && eval->fraction == 0) {
    ZEROD_ASSIGN_OR_RETURN(eval_data_,
                           load_dataset(eval_dataset_config(cfg_.data), cfg_.model.vocab_size, "data.eval.path"));
  }
  const bool packed = data_.packed || (eval && (eval->fraction > 0 ? data_ : eval_data_).packed);
  if (packed) {
    ZEROD_ASSIGN_OR_RETURN(positions_, allocate_spec(*device_, token_positions(cfg_, *ids.tier)));
  }
  std::vector<DataLoader::Source> sources;
  for (size_t i = 0; i < data_.sources.size(); ++i)
    sources.push_back({data_.sources[i].begin, data_.sources[i].tokens, cfg_.data.sources[i].weight});
  ZEROD_ASSIGN_OR_RETURN(DataLoader loader,
                         DataLoader::create(&data_.tokens, cfg_.data.seq_len, cfg_.data.seed, comm_->rank(),
                                            comm_->world_size(), device_->accountant(), data_.windowed, data_.packed,
                                            DataLoader::held_out_share(cfg_.data), sources));
  loader_ = std::make_unique<DataLoader>(std::move(loader));
  if (eval) {
    ZEROD_ASSIGN_OR_RETURN(EvalWindows set, EvalWindows::create(cfg_.data, eval->fraction > 0 ? data_ : eval_data_,
                                                                device_->accountant()));
    eval_ = std::make_unique<EvalWindows>(std::move(set));
  }
  const LoraConfig* lora = cfg_.lora ? &cfg_.lora->adapters : nullptr;
  ZEROD_ASSIGN_OR_RETURN(model_,
                         Gpt::create(cfg_.model, cfg_.micro_batch, cfg_.data.seq_len, cfg_.precision,
                                     cfg_.activation_checkpointing, *device_, *kernels_, cfg_.cpu_checkpointing, lora,
                                     cfg_.grad_accum, packed, cfg_.zero.accumulation == Accumulation::kLayer));
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
    ZEROD_ASSIGN_OR_RETURN(
        base_, FrozenWeights::create(model_->layout(), base, cfg_.lora->nf4_base, *comm_, *device_, *kernels_));
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

double Trainer::read_batches() {
  const int B = cfg_.micro_batch, accum = cfg_.grad_accum;
  const int64_t tokens = int64_t(B) * cfg_.data.seq_len;
  int64_t targets_in_step = 0;  // all ranks', all micro-batches'
  for (int micro = 0; micro < accum; ++micro) {
    targets_in_step += loader_->next_batch(B, inputs_.host<int32_t>() + micro * tokens,
                                           targets_.host<int32_t>() + micro * tokens, positions(micro));
  }
  // Each rank's gradients carry 1/(accum * world) so that their sum over
  // ranks is the mean over the global batch; with a loss mask, the mean is
  // over the targets it counts (a pass's gradient is of its mean over B*T).
  const double counted = static_cast<double>(std::max<int64_t>(targets_in_step, 1));
  return loader_->windowed() ? counted / double(tokens) : double(accum) * comm_->world_size();
}

absl::StatusOr<double> Trainer::compute_gradients(int64_t step, float grad_scale, double lr, double loss_scale) {
  const int B = cfg_.micro_batch, T = cfg_.data.seq_len, accum = cfg_.grad_accum;
  const int64_t tokens = int64_t(B) * T;
  // The host can update each unit as the last micro-batch's backward
  // completes it, with the factor of a step that neither clips nor
  // overflows (exact without clipping or a loss scale; undone otherwise).
  if (zero_->updates_during_backward()) {
    zero_->update_during_backward(static_cast<float>(lr), updates_ + 1, gradient_passes(cfg_),
                                  static_cast<float>(1.0 / loss_scale));
  }
  // A step on the device's stream (a world of one at stage 0) is waited
  // for once, at its end, for its losses and its gradients' norm; any
  // other waits for each pass, whose gradients its stores take on the host.
  const bool on_stream = zero_->steps_on_stream();
  Stream& stream = device_->compute_stream();
  std::vector<Gpt::MicroBatch> batches;
  for (int micro = 0; micro < accum; ++micro) {
    batches.push_back({inputs_.host<int32_t>() + micro * tokens, targets_.host<int32_t>() + micro * tokens,
                       positions(micro), lora_pass_seed(cfg_.run.seed, step, micro, comm_->rank())});
  }
  if (cfg_.zero.accumulation == Accumulation::kLayer) {
    // One pass through the layers for the step (enqueue_layer_major).
    ZEROD_RETURN_IF_ERROR(model_->enqueue_layer_major(weights(), zero_->grads(), batches, B, T, grad_scale));
    if (!on_stream) ZEROD_RETURN_IF_ERROR(device_->synchronize(stream));
  } else {
    for (int micro = 0; micro < accum; ++micro) {
      const Gpt::MicroBatch& b = batches[micro];
      ZEROD_RETURN_IF_ERROR(model_->enqueue_forward_backward(weights(), zero_->grads(), b.inputs, b.targets, B, T,
                                                             grad_scale, b.dropout_seed, micro, b.positions));
      if (!on_stream) ZEROD_RETURN_IF_ERROR(device_->synchronize(stream));
    }
  }
  if (!on_stream) {
    ZEROD_RETURN_IF_ERROR(zero_->reduce_gradients());
    return zero_->grad_sum_squares();
  }
  absl::Status enqueued = zero_->enqueue_step(static_cast<float>(lr), updates_ + 1, loss_scale, cfg_.gradient_clipping);
  // Also after a failure: the stream may still read the step's tokens.
  enqueued.Update(device_->synchronize(stream));
  ZEROD_RETURN_IF_ERROR(enqueued);
  // Not finite exactly where the update's factor was not (a loss scale
  // and a clip that are finite and not negative): the update skipped.
  return zero_->step_sum_squares();
}

absl::StatusOr<StepResult> Trainer::train_step() {
  const bool fp16 = cfg_.precision == DType::kF16;
  const double scale = fp16 ? scaler_.scale() : 1.0;
  zero_->zero_grads();

  StepResult r;
  r.step = ++steps_;
  r.loss_scale = scale;
  const double mean_over = read_batches();
  const double lr = lr_at(cfg_.scheduler, cfg_.optimizer.lr, updates_);
  const bool on_stream = zero_->steps_on_stream();
  ZEROD_ASSIGN_OR_RETURN(const double sumsq,
                         compute_gradients(r.step, static_cast<float>(scale / mean_over), lr, scale));
  double loss_sum = 0.0;
  for (int micro = 0; micro < cfg_.grad_accum; ++micro) loss_sum += model_->pass_loss(micro);
  ZEROD_RETURN_IF_ERROR(all_reduce(*comm_, &loss_sum, 1, CommType::kF64, ReduceOp::kSum));
  r.loss = loss_sum / mean_over;

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

}  // namespace zerod
