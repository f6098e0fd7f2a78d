// The job config (CONFIG.md): DeepSpeed's schema plus the model, data, run and
// activation_checkpointing sections. Parsing validates everything up front so
// a bad config is refused before anything starts, every problem at once; each
// DeepSpeed key is honoured, accepted or refused by deepspeed_keys.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/data/data_config.h"
#include "runtime/model/gpt_config.h"
#include "runtime/model/lora_config.h"
#include "runtime/optim/optim_config.h"
#include "shard/zero_config.h"

namespace zerod {

enum class LogFormat { kText, kJson };

struct LossScaleConfig {
  double loss_scale = 0;  // 0: dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
};

// "auto", "fp32" or "compute", as the config spells it.
const char* micro_batch_grads_name(MicroBatchGrads m);
// "micro_batch", "layer" or "auto".
const char* accumulation_name(Accumulation a);

struct CheckpointConfig {
  std::optional<std::string> dir;  // no checkpoints without one
  int64_t interval = 0;            // steps between saves; 0: only at the end
  int keep = 3;                    // newest complete checkpoints kept
  bool async = true;               // staged in memory and written in the background, where it can be
  bool keep_best = false;          // the lowest eval loss's checkpoint kept apart, as dir/best
};

// run.eval: when the held-out set (data.eval) is evaluated.
struct EvalConfig {
  int64_t interval = 0;  // steps between evaluations; 0: at the end only
  int64_t batches = 0;   // global batches of it an evaluation takes; 0: all
  int patience = 0;      // evaluations without a better loss that stop the run; 0: never
};

// DeepSpeed's tensorboard and csv_monitor sections: rank 0 writes every
// step's figures under output_path/job_name, as DeepSpeed lays them out.
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;  // "": the working directory
  std::string job_name = "DeepSpeedJobName";
};

struct RunConfig {
  int64_t steps = 200;
  uint64_t seed = 1234;
  std::string device = "auto";
  CheckpointConfig checkpoint;
  EvalConfig eval;
  std::optional<std::string> resume;  // "latest" (in checkpoint.dir, if any) or a checkpoint directory
  std::optional<uint64_t> host_memory_limit, gpu_memory_limit;
  double collective_timeout_s = 300;
  int threads = 0;                             // the CPU kernels'; 0: the node's usable CPUs shared among its ranks
  std::optional<std::string> tensorboard_dir;  // TensorBoard's event files here, instead of tensorboard's section
  LogFormat log_format = LogFormat::kText;
  int sample_tokens = 64;           // extension: length of the end-of-run sample
  double sample_temperature = 0.0;  // extension: 0 is greedy
};

// model.lora: train adapters beside frozen base weights (the model's,
// from model.init_from or the seed), which may be held in NF4.
struct LoraJobConfig {
  LoraConfig adapters;
  bool nf4_base = false;                 // base_quant: "nf4"
  std::optional<std::string> init_from;  // a PEFT adapter directory
};

struct JobConfig {
  std::string preset;  // "custom" when no preset
  GptConfig model;
  std::optional<std::string> init_from;
  std::optional<LoraJobConfig> lora;
  DataConfig data;
  RunConfig run;
  bool activation_checkpointing = false;
  // DeepSpeed's activation_checkpointing.cpu_checkpointing: the layer inputs
  // kept for recomputation live in host memory.
  bool cpu_checkpointing = false;

  int64_t train_batch_size = 0;
  int micro_batch = 0;
  int grad_accum = 1;
  int steps_per_print = 10;
  // DeepSpeed's key: time each kernel, copy, host optimizer and NVMe wait,
  // and report where the steps' time went (runtime/core/profiler.h).
  bool wall_clock_breakdown = false;
  double gradient_clipping = 0.0;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  DType precision = DType::kF32;  // kBF16 or kF16 when enabled
  LossScaleConfig fp16;
  ZeroConfig zero;
  MonitorConfig tensorboard, csv_monitor;
  int64_t aio_block_size = 1048576;
  int aio_queue_depth = 8;
  // What decided zero_optimization.accumulation "auto", once resolved.
  std::string accumulation_why;
  // The values "auto" stood for, as the Hugging Face Trainer fills them in:
  // (key path, value), shown at the start and end of the run.
  std::vector<std::pair<std::string, nlohmann::json>> auto_filled;
};

// The banner's line for zero_optimization.accumulation, resolved ("micro-
// batch order (accumulation layer): ..."): "" for micro-batch order unless
// "auto" chose it.
std::string accumulation_line(const JobConfig& cfg);

// The passes in which a step's gradients reach the ZeRO engine's stores:
// a micro-batch's each, or one for a layer-major step.
inline int gradient_passes(const JobConfig& cfg) {
  return cfg.zero.accumulation == Accumulation::kLayer ? 1 : cfg.grad_accum;
}

// Where TensorBoard's event files and the CSV files go (DeepSpeed's
// output_path/job_name, or run.tensorboard_dir); none when off.
std::optional<std::string> tensorboard_log_dir(const JobConfig& cfg);
std::optional<std::string> csv_log_dir(const JobConfig& cfg);

// Applies "key.path=value" (value is JSON; text that is not JSON is taken as a
// string) to `root`, creating objects along the path.
absl::Status apply_override(nlohmann::json& root, const std::string& assignment);

// Parses and validates a config; `world_size` resolves DeepSpeed's batch
// rule. It reads no file.
absl::StatusOr<JobConfig> parse_job_config(const nlohmann::json& root, int world_size);

// Reads the file and applies the overrides in order, without judging the keys.
absl::StatusOr<nlohmann::json> load_job_json(const std::string& path, const std::vector<std::string>& overrides);

// A model of neither preset nor sizes with an init_from takes its shape from
// the Hugging Face config.json init_from names (hf_config.h): its fields
// are written into root's model section, beside those given, which win.
// Nothing else changes; a path that does not resolve is refused.
absl::Status fill_model_from_hf(nlohmann::json& root);

// Reads the file, applies the overrides in order, fills the model's shape
// from init_from where it comes from there, parses. Errors name the file.
absl::StatusOr<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides,
                                          int world_size);

}  // namespace zerod
