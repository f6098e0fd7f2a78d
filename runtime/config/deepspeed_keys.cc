#include "runtime/config/deepspeed_keys.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace zerod {
namespace {

constexpr KeyUse H = KeyUse::kHonoured;
constexpr KeyUse N = KeyUse::kNoEffect;
constexpr KeyUse D = KeyUse::kDefaultOnly;

// Grouped by section, in the order of DeepSpeed's reference. Rows marked H
// are read by job_config.cc; a test checks that each is.
constexpr DeepSpeedKey kKeys[] = {
    // Batch, logging and gradient handling at the top level.
    {"train_batch_size", H, "", "global batch: micro-batch x accumulation x world size"},
    {"train_micro_batch_size_per_gpu", H, "", "a rank's micro-batch"},
    {"gradient_accumulation_steps", H, "", "micro-batches per optimizer step"},
    {"steps_per_print", H, "", "a progress line every N steps"},
    {"wall_clock_breakdown", H, "", "where each step's time went, by phase, at the end of the run"},
    {"gradient_clipping", H, "", "clips the global gradient norm (0: off)"},
    {"communication_data_type", H, "", "fp32 or null: zerod reduces gradients in fp32"},
    {"memory_breakdown", N, "", "zerod prints its memory table at every run's end"},
    {"dump_state", N, "", "the start banner shows the resolved settings"},
    {"disable_allgather", N, "", "read by DeepSpeed and never used"},
    {"seq_parallel_comm_data_type", N, "", "only for sequence parallelism"},
    {"seq_parallel_communication_data_type", N, "", "a spelling DeepSpeed does not read (it ignores the key)"},
    {"prescale_gradients", N, "",
     "zerod scales each rank's loss by 1/(accumulation x world size), so gradients are always divided before the "
     "reduction"},
    {"gradient_predivide_factor", N, "", "as prescale_gradients"},
    {"sparse_gradients", N, "", "embedding gradients are reduced dense, with the same values"},
    {"graph_harvesting", N, "", "a kernel-launch optimization of DeepSpeed's bf16 optimizer"},
    {"zero_allow_untested_optimizer", N, "", "zerod's optimizers are its own"},
    {"zero_force_ds_cpu_optimizer", N, "", "zerod's host optimizer is its own"},
    {"vocabulary_size", N, "", "DeepSpeed only warns with it; the model's vocabulary is model.vocab_size"},
    {"dataloader_drop_last", N, "", "zerod's loader draws whole batches from the data"},
    {"use_data_before_expert_parallelism", N, "", "only for mixture-of-experts models"},
    {"allgather_size", N, "", "read only when zero_optimization is a bare boolean"},
    // Not DeepSpeed's keys, which it ignores, found in configs projects ship.
    {"_comment", N, "", "not a DeepSpeed key: a comment"},
    {"cuda_visible_devices", N, "", "not a DeepSpeed key (DeepSpeed ignores it)"},
    {"comms_config.*", N, "", "not a DeepSpeed key (DeepSpeed ignores it)"},
    {"monitor_config.*", N, "", "not a DeepSpeed key (DeepSpeed ignores it)"},

    // Precision.
    {"fp16.enabled", H, "", "fp16 compute with fp32 master weights and dynamic loss scaling"},
    {"fp16.loss_scale", H, "", "0: dynamic; otherwise a static scale"},
    {"fp16.initial_scale_power", H, "", "the first dynamic scale is 2^this"},
    {"fp16.loss_scale_window", H, "", "steps without overflow before the scale doubles"},
    {"fp16.hysteresis", H, "", "overflows tolerated before the scale halves"},
    {"fp16.consecutive_hysteresis", H, "", "refills hysteresis after each step without overflow"},
    {"fp16.min_loss_scale", H, "", "the scale's floor"},
    {"fp16.auto_cast", N, "", "the whole model runs in the training precision"},
    {"fp16.fp16_master_weights_and_grads", D, "false", "fp16 master weights (zerod keeps them in fp32)"},
    {"bf16.enabled", H, "", "bf16 compute with fp32 master weights"},
    {"bf16.immediate_grad_update", N, "", "when DeepSpeed's bf16 optimizer applies gradients; the result is the same"},
    {"bf16.*", N, "", "DeepSpeed reads only enabled here (fp16's loss-scale keys placed under bf16 do nothing)"},
    {"bfloat16.enabled", H, "", "the older spelling of bf16.enabled"},
    {"bfloat16.*", N, "", "as bf16"},
    {"amp.enabled", D, "false", "NVIDIA Apex AMP"},
    {"amp.*", N, "", "Apex's own settings, passed to it only when amp.enabled"},
    {"data_types.grad_accum_dtype", H, "", "fp32 or null: zerod accumulates gradients in fp32"},

    // ZeRO.
    {"zero_optimization.stage", H, "", "0-3: what is sharded across ranks"},
    {"zero_optimization.reduce_bucket_size", H, "", "gradient elements in flight in one reduction"},
    {"zero_optimization.stage3_prefetch_bucket_size", H, "", "stage 3: parameter elements gathered ahead of use"},
    {"zero_optimization.prefetch_bucket_size", H, "", "the other spelling of stage3_prefetch_bucket_size"},
    {"zero_optimization.stage3_param_persistence_threshold", H, "",
     "stage 3: tensors below this many elements stay whole on every rank"},
    {"zero_optimization.param_persistence_threshold", H, "",
     "the other spelling of stage3_param_persistence_threshold"},
    {"zero_optimization.sub_group_size", H, "", "elements the host optimizer updates at a time with offload"},
    {"zero_optimization.overlap_comm", H, "", "reduce each layer's gradients while backward goes on"},
    {"zero_optimization.micro_batch_grads", H, "",
     "zerod's: auto, fp32 or compute: each micro-batch's gradients summed as they are or in the 16-bit type"},
    {"zero_optimization.accumulation", H, "",
     "zerod's: micro_batch, layer or auto: a step's micro-batches each through every layer, or each layer's "
     "weights once a step through every micro-batch"},
    {"zero_optimization.cpu_offload", H, "", "the older spelling of offload_optimizer.device \"cpu\" (true)"},
    {"zero_optimization.cpu_offload_param", H, "", "the older spelling of offload_param.device \"cpu\" (true)"},
    {"zero_optimization.offload_optimizer.device", H, "",
     "none, cpu or nvme: where the master weights and Adam states live"},
    {"zero_optimization.offload_optimizer.nvme_path", H, "", "directory of the states' file"},
    {"zero_optimization.offload_optimizer.pin_memory", H, "", "page-locked host memory for the states"},
    {"zero_optimization.offload_optimizer.buffer_count", H, "", "buffers of the file's transfers"},
    {"zero_optimization.offload_optimizer.super_offload", H, "", "zerod's: the host update runs during backward"},
    {"zero_optimization.offload_optimizer.pipeline_read", N, "", "zerod always reads the next unit during the update"},
    {"zero_optimization.offload_optimizer.pipeline_write", N, "", "zerod always writes during the update"},
    {"zero_optimization.offload_optimizer.fast_init", N, "", "how DeepSpeed fills the file first"},
    {"zero_optimization.offload_optimizer.ratio", D, "1.0",
     "offloading a part of the optimizer (zerod offloads all of it)"},
    {"zero_optimization.offload_param.device", H, "", "none, cpu or nvme (stage 3): where the parameter shard lives"},
    {"zero_optimization.offload_param.nvme_path", H, "", "directory of the parameters' file"},
    {"zero_optimization.offload_param.pin_memory", H, "", "page-locked host memory for the parameters"},
    {"zero_optimization.offload_param.buffer_count", H, "", "buffers of the file's transfers"},
    {"zero_optimization.offload_param.buffer_size", N, "", "zerod sizes its buffers by the layer"},
    {"zero_optimization.offload_param.max_in_cpu", N, "", "zerod keeps no parameters in host memory beside the file"},
    {"zero_optimization.contiguous_gradients", N, "", "zerod's gradients always lie in contiguous buckets"},
    {"zero_optimization.reduce_scatter", N, "", "zerod reduce-scatters where the stage shards gradients"},
    {"zero_optimization.use_multi_rank_bucket_allreduce", N, "", "how DeepSpeed groups its all-reduces"},
    {"zero_optimization.allgather_partitions", N, "", "read by DeepSpeed and never used"},
    {"zero_optimization.allgather_bucket_size", N, "", "zerod gathers the updated parameters layer by layer"},
    {"zero_optimization.load_from_fp32_weights", D, "true", "resuming from 16-bit weights (zerod resumes from fp32)"},
    {"zero_optimization.elastic_checkpoint", N, "", "zerod's checkpoints resume at any world size"},
    {"zero_optimization.cpu_offload_use_pin_memory", N, "", "DeepSpeed warns and ignores it"},
    {"zero_optimization.stage3_max_live_parameters", N, "", "zerod holds at most a layer and its prefetch gathered"},
    {"zero_optimization.max_live_parameters", N, "", "as stage3_max_live_parameters"},
    {"zero_optimization.stage3_max_reuse_distance", N, "", "zerod releases each layer after use"},
    {"zero_optimization.max_reuse_distance", N, "", "as stage3_max_reuse_distance"},
    {"zero_optimization.stage3_model_persistence_threshold", D, "9223372036854775807",
     "a cap on the elements kept whole on every rank"},
    {"zero_optimization.model_persistence_threshold", D, "9223372036854775807",
     "a cap on the elements kept whole on every rank"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", N, "",
     "zero-worker export writes whole Hugging Face weights from any checkpoint"},
    {"zero_optimization.gather_16bit_weights_on_model_save", N, "", "as stage3_gather_16bit_weights_on_model_save"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", N, "",
     "as stage3_gather_16bit_weights_on_model_save"},
    {"zero_optimization.stage3_module_granularity_threshold", N, "", "zerod gathers by layer"},
    {"zero_optimization.module_granularity_threshold", N, "", "zerod gathers by layer"},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", N, "", "zerod gathers with all-gather"},
    {"zero_optimization.use_all_reduce_for_fetch_params", N, "", "zerod gathers with all-gather"},
    {"zero_optimization.ignore_unused_parameters", N, "", "every parameter of zerod's models gets a gradient"},
    {"zero_optimization.round_robin_gradients", N, "", "how DeepSpeed copies gradients to the host"},
    {"zero_optimization.legacy_stage1", D, "false", "DeepSpeed's removed first ZeRO-1"},
    {"zero_optimization.zero_hpz_partition_size", D, "1", "ZeRO++ hierarchical partitioning"},
    {"zero_optimization.zero_quantized_weights", D, "false", "ZeRO++ quantized weight gathers"},
    {"zero_optimization.zero_quantized_nontrainable_weights", D, "false", "quantized frozen weights"},
    {"zero_optimization.zero_quantized_gradients", D, "false", "ZeRO++ quantized gradient reduction"},
    {"zero_optimization.zeropp_loco_param", D, "null", "LoCo error feedback for ZeRO++"},
    {"zero_optimization.mics_shard_size", D, "-1", "MiCS sharding within groups of ranks"},
    {"zero_optimization.mics_hierarchical_params_gather", N, "", "only with MiCS"},
    {"zero_optimization.memory_efficient_linear", N, "", "a PyTorch autograd detail of DeepSpeed's"},
    {"zero_optimization.pipeline_loading_checkpoint", N, "", "only with pipeline parallelism"},
    {"zero_optimization.override_module_apply", N, "", "a PyTorch module detail of DeepSpeed's"},
    {"zero_optimization.log_trace_cache_warnings", N, "", "DeepSpeed's stage-3 trace cache"},

    // Activation checkpointing: zerod's switch and DeepSpeed's settings.
    {"activation_checkpointing.enabled", H, "", "zerod's: recompute each layer's activations in backward"},
    {"activation_checkpointing.cpu_checkpointing", H, "",
     "checkpointed layer inputs kept in host memory (on the CPU they are there already)"},
    {"activation_checkpointing.partition_activations", N, "",
     "splits them across model-parallel ranks, which zerod has not"},
    {"activation_checkpointing.contiguous_memory_optimization", N, "", "zerod's checkpoints are contiguous"},
    {"activation_checkpointing.number_checkpoints", N, "", "sizes DeepSpeed's contiguous buffer"},
    {"activation_checkpointing.synchronize_checkpoint_boundary", N, "", "a device synchronization for profiling"},
    {"activation_checkpointing.profile", N, "", "wall_clock_breakdown shows forward and backward time"},

    // Asynchronous I/O for NVMe offload.
    {"aio.block_size", H, "", "bytes a transfer"},
    {"aio.queue_depth", H, "", "transfers in flight"},
    {"aio.intra_op_parallelism", N, "", "zerod's io_uring queue needs no threads"},
    {"aio.thread_count", N, "", "the older name of intra_op_parallelism"},
    {"aio.single_submit", N, "", "zerod submits in batches"},
    {"aio.overlap_events", N, "", "zerod always overlaps"},
    {"aio.use_gds", D, "false", "GPUDirect Storage"},

    // Profiling and monitoring: zerod's run output carries the figures.
    {"flops_profiler.enabled", H, "", "turns on wall_clock_breakdown, as in DeepSpeed"},
    {"flops_profiler.*", N, "", "the run summary gives throughput; wall_clock_breakdown the phases"},
    {"tensorboard.enabled", H, "", "rank 0 writes every step's figures as TensorBoard event files"},
    {"tensorboard.output_path", H, "", "their directory's parent (\"\": the working directory)"},
    {"tensorboard.job_name", H, "", "their directory, under output_path"},
    {"csv_monitor.enabled", H, "", "rank 0 writes every step's figures as CSV files, one a figure"},
    {"csv_monitor.output_path", H, "", "their directory's parent (\"\": the working directory)"},
    {"csv_monitor.job_name", H, "", "their directory, under output_path"},
    {"wandb.enabled", D, "false",
     "Weights & Biases, a service over the network (tensorboard and csv_monitor write the same figures to files)"},
    {"wandb.*", N, "", "read only with wandb.enabled"},
    {"comet.enabled", D, "false",
     "Comet, a service over the network (tensorboard and csv_monitor write the same figures to files)"},
    {"comet.*", N, "", "read only with comet.enabled"},
    {"comms_logger.*", N, "", "wall_clock_breakdown times the collectives"},
    {"timers.*", N, "", "the progress line shows throughput"},

    // Checkpoints.
    {"checkpoint.tag_validation", N, "", "zerod's ranks save one step together"},
    {"checkpoint.load_universal", N, "", "every zerod checkpoint resumes at any world size"},
    {"checkpoint.use_node_local_storage", D, "false", "checkpoints on each node's own disk"},
    {"checkpoint.parallel_write.*", N, "", "only with pipeline parallelism"},
    {"nebula.enabled", D, "false", "the Nebula checkpoint engine"},
    {"nebula.*", N, "", "only with nebula.enabled"},

    // Optimizer and learning-rate schedule.
    {"optimizer.type", H, "", "Adam, AdamW (any case) or zerod's AdamW8bit"},
    {"optimizer.params.lr", H, "", "learning rate"},
    {"optimizer.params.betas", H, "", "[beta1, beta2]"},
    {"optimizer.params.eps", H, "", "added to the denominator"},
    {"optimizer.params.weight_decay", H, "", "decoupled, or as L2 for Adam with adam_w_mode false"},
    {"optimizer.params.adam_w_mode", H, "", "Adam: decoupled weight decay (true, DeepSpeed's default) or L2"},
    {"optimizer.params.bias_correction", H, "", "Adam's bias correction of m and v"},
    {"optimizer.params.torch_adam", N, "", "picks PyTorch's implementation of the same update"},
    {"optimizer.params.fp32_optimizer_states", N, "", "zerod's Adam states are fp32 (8-bit with AdamW8bit)"},
    {"optimizer.params.set_grad_none", N, "", "a PyTorch detail"},
    {"optimizer.params.amsgrad", D, "false", "AMSGrad"},
    {"optimizer.params.max_grad_norm", D, "null",
     "clipping inside the optimizer (DeepSpeed refuses it too; gradient_clipping clips)"},
    {"optimizer.legacy_fusion", N, "", "a detail of DeepSpeed's fp16 optimizer"},
    {"scheduler.type", H, "", "WarmupLR, WarmupDecayLR or WarmupCosineLR"},
    {"scheduler.params.warmup_min_lr", H, "", "learning rate at step 0"},
    {"scheduler.params.warmup_max_lr", H, "", "learning rate after warmup"},
    {"scheduler.params.warmup_num_steps", H, "", "warmup steps"},
    {"scheduler.params.warmup_type", H, "", "log or linear"},
    {"scheduler.params.total_num_steps", H, "", "WarmupDecayLR, WarmupCosineLR: steps to the end of the decay"},
    {"scheduler.params.warmup_min_ratio", H, "", "WarmupCosineLR: start as a fraction of lr"},
    {"scheduler.params.cos_min_ratio", H, "", "WarmupCosineLR: end as a fraction of lr"},
    {"scheduler.params.last_batch_iteration", D, "-1", "starting a schedule part way (zerod resumes its own)"},

    // Whole features zerod does not have: accepted only switched off.
    {"sparse_attention", D, "null", "sparse attention"},
    {"pipeline.stages", D, "\"auto\"", "pipeline parallelism"},
    {"pipeline.partition", D, "\"best\"", "pipeline parallelism"},
    {"pipeline.seed_layers", D, "false", "pipeline parallelism"},
    {"pipeline.activation_checkpoint_interval", D, "0", "pipeline parallelism"},
    {"pipeline.pipe_partitioned", D, "true", "pipeline parallelism"},
    {"pipeline.grad_partitioned", D, "true", "pipeline parallelism"},
    {"pipeline.use_reentrant", D, "true", "pipeline parallelism"},
    {"tensor_parallel", D, "null", "tensor parallelism (AutoTP)"},
    {"hybrid_engine.enabled", D, "false", "DeepSpeed-Chat's hybrid engine"},
    {"hybrid_engine.*", N, "", "only with hybrid_engine.enabled"},
    {"elasticity.enabled", D, "false", "elastic batch sizes"},
    {"elasticity.*", N, "", "only with elasticity.enabled"},
    {"autotuning.enabled", D, "false", "the autotuner"},
    {"autotuning.*", N, "", "only with autotuning.enabled"},
    {"data_efficiency.enabled", D, "false", "data efficiency (curriculum sampling, random-LTD)"},
    {"data_efficiency.*", N, "", "only with data_efficiency.enabled"},
    {"curriculum_learning.enabled", D, "false", "curriculum learning"},
    {"curriculum_learning.*", N, "", "only with curriculum_learning.enabled"},
    {"progressive_layer_drop.enabled", D, "false", "progressive layer drop"},
    {"progressive_layer_drop.*", N, "", "only with progressive_layer_drop.enabled"},
    {"eigenvalue.enabled", D, "false", "eigenvalue-guided quantization (MoQ)"},
    {"eigenvalue.*", N, "", "only with eigenvalue.enabled"},
    {"quantize_training.enabled", D, "false", "quantized training (MoQ)"},
    {"quantize_training.*", N, "", "only with quantize_training.enabled"},
    {"compression_training", D, "null", "model compression (quantization, pruning, layer reduction)"},
    {"weight_quantization", D, "null", "quantized weights"},
};

// Numbers compare by value: DeepSpeed configs write 5e8 for 500000000.
bool same_json(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_json(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

// docs/config.md's words for what zerod does with a key.
std::string use_text(const DeepSpeedKey& k) {
  switch (k.use) {
    case KeyUse::kHonoured:
      return "honoured";
    case KeyUse::kNoEffect:
      return "accepted, no effect";
    case KeyUse::kDefaultOnly:
      break;
  }
  return std::string_view(k.default_json) == "null" ? "refused unless absent"
                                                    : absl::StrCat("refused unless `", k.default_json, "`");
}

}  // namespace

std::span<const DeepSpeedKey> deepspeed_keys() { return kKeys; }

const DeepSpeedKey* find_deepspeed_key(std::string_view path) {
  for (const DeepSpeedKey& k : kKeys) {
    if (path == k.path) return &k;
  }
  // The nearest "prefix.*" above the path.
  for (std::string_view prefix = path; !prefix.empty();) {
    const size_t dot = prefix.rfind('.');
    if (dot == std::string_view::npos) break;
    prefix = prefix.substr(0, dot);
    for (const DeepSpeedKey& k : kKeys) {
      const std::string_view p = k.path;
      if (p.size() == prefix.size() + 2 && p.starts_with(prefix) && p.ends_with(".*")) return &k;
    }
  }
  return nullptr;
}

bool has_deepspeed_keys_under(std::string_view path) {
  return std::any_of(std::begin(kKeys), std::end(kKeys), [&](const DeepSpeedKey& k) {
    const std::string_view p = k.path;
    return p.size() > path.size() + 1 && p.starts_with(path) && p[path.size()] == '.';
  });
}

bool is_deepspeed_default(const DeepSpeedKey& key, const nlohmann::json& value) {
  if (value == "auto") return true;
  return same_json(value, nlohmann::json::parse(key.default_json));
}

std::string deepspeed_keys_markdown() {
  std::string md = "| key | zerod | what |\n|---|---|---|\n";
  for (const DeepSpeedKey& k : kKeys) {
    absl::StrAppend(&md, "| `", k.path, "` | ", use_text(k), " | ", absl::StrReplaceAll(k.what, {{"|", "\\|"}}),
                    " |\n");
  }
  return md;
}

}  // namespace zerod
