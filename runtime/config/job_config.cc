#include "runtime/config/job_config.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/config/json_reader.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

absl::Status check(bool ok, const JsonReader& r, const char* key, const std::string& what) {
  return ok ? absl::OkStatus() : config_error(r.key_path(key), what);
}

// A seed: any integer from 0 to 2^63 - 1.
absl::Status read_seed(JsonReader& r, uint64_t* seed) {
  int64_t v = static_cast<int64_t>(*seed);
  ZEROD_RETURN_IF_ERROR(r.read("seed", &v));
  ZEROD_RETURN_IF_ERROR(check(v >= 0, r, "seed", absl::StrCat("must not be negative, got ", v)));
  *seed = static_cast<uint64_t>(v);
  return absl::OkStatus();
}

// Reads a string key that must be one of `names`; stores the matching index.
template <class Enum>
absl::Status read_enum(JsonReader& r, const char* key, std::initializer_list<std::pair<const char*, Enum>> names,
                       Enum* out) {
  if (!r.has(key)) {
    r.raw(key);
    return absl::OkStatus();
  }
  std::string s;
  ZEROD_RETURN_IF_ERROR(r.read(key, &s));
  std::string expected;
  for (const auto& [name, value] : names) {
    if (s == name) {
      *out = value;
      return absl::OkStatus();
    }
    absl::StrAppend(&expected, expected.empty() ? "" : ", ", name);
  }
  return config_error(r.key_path(key), absl::StrCat("'", s, "' is not one of: ", expected));
}

absl::Status parse_model(JsonReader r, JobConfig& cfg) {
  cfg.preset = "custom";
  ZEROD_RETURN_IF_ERROR(r.read("preset", &cfg.preset));
  if (cfg.preset != "custom") {
    ZEROD_ASSIGN_OR_RETURN(cfg.model, gpt_preset(cfg.preset));
  }
  GptConfig& m = cfg.model;
  ZEROD_RETURN_IF_ERROR(r.read("n_layer", &m.n_layer));
  ZEROD_RETURN_IF_ERROR(r.read("n_head", &m.n_head));
  ZEROD_RETURN_IF_ERROR(r.read("n_embd", &m.n_embd));
  ZEROD_RETURN_IF_ERROR(r.read("vocab_size", &m.vocab_size));
  ZEROD_RETURN_IF_ERROR(r.read("block_size", &m.block_size));
  ZEROD_RETURN_IF_ERROR(r.read("init_from", &cfg.init_from));
  ZEROD_RETURN_IF_ERROR(r.finish());
  if (cfg.preset == "custom" && m.n_layer == 0) {
    return config_error("model", "preset 'custom' needs n_layer, n_head, n_embd, vocab_size and block_size");
  }
  return validate_gpt_config(m);
}

absl::Status parse_data(JsonReader r, JobConfig& cfg) {
  DataConfig& d = cfg.data;
  ZEROD_RETURN_IF_ERROR(read_enum<DataKind>(
      r, "kind", {{"synthetic", DataKind::kSynthetic}, {"text", DataKind::kText}, {"tokens", DataKind::kTokens}},
      &d.kind));
  ZEROD_RETURN_IF_ERROR(r.read("path", &d.path));
  d.seq_len = cfg.model.block_size;
  ZEROD_RETURN_IF_ERROR(r.read("seq_len", &d.seq_len));
  ZEROD_RETURN_IF_ERROR(read_seed(r, &d.seed));
  ZEROD_RETURN_IF_ERROR(r.finish());
  ZEROD_RETURN_IF_ERROR(check(d.kind == DataKind::kSynthetic || !d.path.empty(), r, "path",
                              "required for data.kind 'text' and 'tokens'"));
  ZEROD_RETURN_IF_ERROR(check(d.kind != DataKind::kSynthetic || !r.has("path"), r, "path",
                              "is not read by data.kind 'synthetic' (the task is generated from data.seed)"));
  ZEROD_RETURN_IF_ERROR(check(d.seq_len >= 1 && d.seq_len <= cfg.model.block_size, r, "seq_len",
                              absl::StrCat("must be in [1, model.block_size = ", cfg.model.block_size, "], got ",
                                           d.seq_len)));
  return absl::OkStatus();
}

absl::Status parse_run(JsonReader r, RunConfig& run) {
  ZEROD_RETURN_IF_ERROR(r.read("steps", &run.steps));
  ZEROD_RETURN_IF_ERROR(check(run.steps >= 1, r, "steps", absl::StrCat("must be at least 1, got ", run.steps)));
  ZEROD_RETURN_IF_ERROR(read_seed(r, &run.seed));
  ZEROD_RETURN_IF_ERROR(r.read("device", &run.device));
  ZEROD_RETURN_IF_ERROR(check(run.device == "cpu" || run.device == "cuda" || run.device == "auto", r, "device",
                              absl::StrCat("'", run.device, "' is not one of: cpu, cuda, auto")));
  {
    ZEROD_ASSIGN_OR_RETURN(JsonReader c, r.section("checkpoint"));
    ZEROD_RETURN_IF_ERROR(c.read("dir", &run.checkpoint.dir));
    ZEROD_RETURN_IF_ERROR(c.read("interval", &run.checkpoint.interval));
    ZEROD_RETURN_IF_ERROR(c.read("keep", &run.checkpoint.keep));
    ZEROD_RETURN_IF_ERROR(c.read("async", &run.checkpoint.async));
    ZEROD_RETURN_IF_ERROR(c.finish());
    ZEROD_RETURN_IF_ERROR(check(run.checkpoint.interval >= 0, c, "interval",
                                "must not be negative (0 saves only at the end)"));
    ZEROD_RETURN_IF_ERROR(check(run.checkpoint.keep >= 1, c, "keep", "must be at least 1"));
    ZEROD_RETURN_IF_ERROR(check(!run.checkpoint.dir || !run.checkpoint.dir->empty(), c, "dir", "must not be empty"));
  }
  ZEROD_RETURN_IF_ERROR(r.read("resume", &run.resume));
  ZEROD_RETURN_IF_ERROR(check(!run.resume || !run.resume->empty(), r, "resume",
                              "must be \"latest\" or a checkpoint directory"));
  ZEROD_RETURN_IF_ERROR(check(run.resume != "latest" || run.checkpoint.dir, r, "resume",
                              "\"latest\" needs run.checkpoint.dir to look in"));
  ZEROD_RETURN_IF_ERROR(r.read_bytes("host_memory_limit", &run.host_memory_limit));
  ZEROD_RETURN_IF_ERROR(r.read_bytes("gpu_memory_limit", &run.gpu_memory_limit));
  ZEROD_RETURN_IF_ERROR(r.read("collective_timeout_s", &run.collective_timeout_s));
  ZEROD_RETURN_IF_ERROR(
      check(run.collective_timeout_s > 0, r, "collective_timeout_s", "must be positive"));
  ZEROD_RETURN_IF_ERROR(r.read("tensorboard_dir", &run.tensorboard_dir));
  ZEROD_RETURN_IF_ERROR(
      check(!run.tensorboard_dir, r, "tensorboard_dir", "TensorBoard output is not supported by this build"));
  ZEROD_RETURN_IF_ERROR(
      read_enum<LogFormat>(r, "log_format", {{"text", LogFormat::kText}, {"json", LogFormat::kJson}}, &run.log_format));
  {
    ZEROD_ASSIGN_OR_RETURN(JsonReader s, r.section("sample"));
    ZEROD_RETURN_IF_ERROR(s.read("tokens", &run.sample_tokens));
    ZEROD_RETURN_IF_ERROR(s.read("temperature", &run.sample_temperature));
    ZEROD_RETURN_IF_ERROR(s.finish());
    ZEROD_RETURN_IF_ERROR(check(run.sample_tokens >= 0, s, "tokens", "must not be negative"));
    ZEROD_RETURN_IF_ERROR(check(run.sample_temperature >= 0, s, "temperature", "must not be negative"));
  }
  return r.finish();
}

absl::Status parse_optimizer(JsonReader r, OptimizerConfig& o) {
  ZEROD_RETURN_IF_ERROR(read_enum<OptimizerType>(
      r, "type", {{"AdamW", OptimizerType::kAdamW}, {"Adam", OptimizerType::kAdam}, {"AdamW8bit", OptimizerType::kAdamW8bit}},
      &o.type));
  ZEROD_ASSIGN_OR_RETURN(JsonReader p, r.section("params"));
  ZEROD_RETURN_IF_ERROR(p.read("lr", &o.lr));
  ZEROD_RETURN_IF_ERROR(check(o.lr >= 0, p, "lr", absl::StrCat("must not be negative, got ", o.lr)));
  if (const nlohmann::json* betas = p.raw("betas")) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number()) {
      return config_error(p.key_path("betas"), absl::StrCat("expected [beta1, beta2], got ", betas->dump()));
    }
    o.beta1 = (*betas)[0].get<double>();
    o.beta2 = (*betas)[1].get<double>();
    ZEROD_RETURN_IF_ERROR(check(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, p, "betas",
                                "each beta must be in [0, 1)"));
  }
  ZEROD_RETURN_IF_ERROR(p.read("eps", &o.eps));
  ZEROD_RETURN_IF_ERROR(check(o.eps > 0, p, "eps", "must be positive"));
  ZEROD_RETURN_IF_ERROR(p.read("weight_decay", &o.weight_decay));
  ZEROD_RETURN_IF_ERROR(check(o.weight_decay >= 0, p, "weight_decay", "must not be negative"));
  ZEROD_RETURN_IF_ERROR(p.finish());
  return r.finish();
}

absl::Status parse_scheduler(JsonReader r, SchedulerConfig& s) {
  ZEROD_RETURN_IF_ERROR(read_enum<SchedulerType>(r, "type",
                                                 {{"WarmupLR", SchedulerType::kWarmupLR},
                                                  {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
                                                  {"WarmupCosineLR", SchedulerType::kWarmupCosineLR}},
                                                 &s.type));
  ZEROD_ASSIGN_OR_RETURN(JsonReader p, r.section("params"));
  ZEROD_RETURN_IF_ERROR(check(s.type != SchedulerType::kNone || !r.has("params"), r, "type",
                              "required when scheduler.params is given"));
  ZEROD_RETURN_IF_ERROR(p.read("warmup_num_steps", &s.warmup_num_steps));
  ZEROD_RETURN_IF_ERROR(check(s.warmup_num_steps >= 0, p, "warmup_num_steps", "must not be negative"));
  ZEROD_RETURN_IF_ERROR(
      read_enum<WarmupType>(p, "warmup_type", {{"log", WarmupType::kLog}, {"linear", WarmupType::kLinear}}, &s.warmup_type));
  if (s.type == SchedulerType::kWarmupCosineLR) {
    ZEROD_RETURN_IF_ERROR(p.read("warmup_min_ratio", &s.warmup_min_ratio));
    ZEROD_RETURN_IF_ERROR(p.read("cos_min_ratio", &s.cos_min_ratio));
    // Fractions of the optimizer's lr: where warmup starts, where the cosine ends.
    for (const auto& [key, v] :
         {std::pair{"warmup_min_ratio", s.warmup_min_ratio}, {"cos_min_ratio", s.cos_min_ratio}}) {
      ZEROD_RETURN_IF_ERROR(check(v >= 0 && v <= 1, p, key, absl::StrCat("must be in [0, 1], got ", v)));
    }
  } else {
    ZEROD_RETURN_IF_ERROR(p.read("warmup_min_lr", &s.warmup_min_lr));
    ZEROD_RETURN_IF_ERROR(p.read("warmup_max_lr", &s.warmup_max_lr));
    ZEROD_RETURN_IF_ERROR(check(s.warmup_min_lr >= 0, p, "warmup_min_lr", "must not be negative"));
    ZEROD_RETURN_IF_ERROR(check(s.warmup_max_lr >= 0, p, "warmup_max_lr", "must not be negative"));
  }
  if (s.type == SchedulerType::kWarmupDecayLR || s.type == SchedulerType::kWarmupCosineLR) {
    ZEROD_RETURN_IF_ERROR(check(p.has("total_num_steps"), p, "total_num_steps", "required by this scheduler"));
    ZEROD_RETURN_IF_ERROR(p.read("total_num_steps", &s.total_num_steps));
    ZEROD_RETURN_IF_ERROR(check(s.total_num_steps >= 1, p, "total_num_steps", "must be at least 1"));
  }
  ZEROD_RETURN_IF_ERROR(p.finish());
  return r.finish();
}

absl::Status parse_fp16(JsonReader r, bool* enabled, LossScaleConfig& f) {
  ZEROD_RETURN_IF_ERROR(r.read("enabled", enabled));
  ZEROD_RETURN_IF_ERROR(r.read("loss_scale", &f.loss_scale));
  ZEROD_RETURN_IF_ERROR(check(f.loss_scale >= 0, r, "loss_scale", "must not be negative (0 is dynamic)"));
  ZEROD_RETURN_IF_ERROR(r.read("initial_scale_power", &f.initial_scale_power));
  ZEROD_RETURN_IF_ERROR(check(f.initial_scale_power >= 0 && f.initial_scale_power <= 126, r,
                              "initial_scale_power", "must be in [0, 126]"));
  ZEROD_RETURN_IF_ERROR(r.read("loss_scale_window", &f.loss_scale_window));
  ZEROD_RETURN_IF_ERROR(check(f.loss_scale_window >= 1, r, "loss_scale_window", "must be at least 1"));
  ZEROD_RETURN_IF_ERROR(r.read("hysteresis", &f.hysteresis));
  ZEROD_RETURN_IF_ERROR(check(f.hysteresis >= 1, r, "hysteresis", "must be at least 1"));
  ZEROD_RETURN_IF_ERROR(r.read("consecutive_hysteresis", &f.consecutive_hysteresis));
  ZEROD_RETURN_IF_ERROR(r.read("min_loss_scale", &f.min_loss_scale));
  ZEROD_RETURN_IF_ERROR(check(f.min_loss_scale > 0, r, "min_loss_scale", "must be positive"));
  return r.finish();
}

absl::Status parse_offload(JsonReader r, OffloadConfig& o) {
  ZEROD_RETURN_IF_ERROR(read_enum<OffloadDevice>(
      r, "device", {{"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}},
      &o.device));
  ZEROD_RETURN_IF_ERROR(r.read("nvme_path", &o.nvme_path));
  ZEROD_RETURN_IF_ERROR(r.read("pin_memory", &o.pin_memory));
  ZEROD_RETURN_IF_ERROR(r.read("buffer_count", &o.buffer_count));
  ZEROD_RETURN_IF_ERROR(check(o.buffer_count >= 1, r, "buffer_count", "must be at least 1"));
  return r.finish();
}

absl::Status parse_zero(JsonReader r, ZeroConfig& z) {
  ZEROD_RETURN_IF_ERROR(r.read("stage", &z.stage));
  ZEROD_RETURN_IF_ERROR(check(z.stage >= 0 && z.stage <= 3, r, "stage", absl::StrCat("must be 0, 1, 2 or 3, got ", z.stage)));
  // Element counts; 0 means something only for the prefetch (none) and the
  // persistence threshold (nothing persists).
  const std::tuple<const char*, int64_t*, int64_t> sizes[] = {
      {"reduce_bucket_size", &z.reduce_bucket_size, 1},
      {"allgather_bucket_size", &z.allgather_bucket_size, 1},
      {"stage3_prefetch_bucket_size", &z.stage3_prefetch_bucket_size, 0},
      {"stage3_param_persistence_threshold", &z.stage3_param_persistence_threshold, 0},
      {"stage3_max_live_parameters", &z.stage3_max_live_parameters, 1},
      {"sub_group_size", &z.sub_group_size, 1}};
  for (const auto& [key, out, least] : sizes) {
    ZEROD_RETURN_IF_ERROR(r.read(key, out));
    ZEROD_RETURN_IF_ERROR(check(*out >= least, r, key,
                                least == 0 ? absl::StrCat("must not be negative, got ", *out)
                                           : absl::StrCat("must be at least 1, got ", *out)));
  }
  ZEROD_RETURN_IF_ERROR(r.read("overlap_comm", &z.overlap_comm));
  ZEROD_RETURN_IF_ERROR(r.read("contiguous_gradients", &z.contiguous_gradients));
  ZEROD_ASSIGN_OR_RETURN(JsonReader oo, r.section("offload_optimizer"));
  ZEROD_RETURN_IF_ERROR(oo.read("super_offload", &z.offload_optimizer.super_offload));
  ZEROD_RETURN_IF_ERROR(parse_offload(oo, z.offload_optimizer));
  ZEROD_ASSIGN_OR_RETURN(JsonReader op, r.section("offload_param"));
  ZEROD_RETURN_IF_ERROR(parse_offload(op, z.offload_param));
  ZEROD_RETURN_IF_ERROR(check(z.offload_param.device == OffloadDevice::kNone || z.stage == 3, op, "device",
                              absl::StrCat("offloading parameters needs stage 3, but stage is ", z.stage)));
  // The update runs during backward only where the host adds each unit's
  // gradients (into memory or a file).
  const bool host_update = z.offload_optimizer.device != OffloadDevice::kNone && z.stage >= 2;
  ZEROD_RETURN_IF_ERROR(check(!z.offload_optimizer.super_offload || host_update, oo, "super_offload",
                              "needs stage 2 or 3 with offload_optimizer.device \"cpu\" or \"nvme\""));
  for (const auto& [reader, o] : {std::pair{&oo, &z.offload_optimizer}, std::pair{&op, &z.offload_param}}) {
    ZEROD_RETURN_IF_ERROR(check(o->device != OffloadDevice::kNvme || o->nvme_path.has_value(), *reader, "nvme_path",
                                "is needed with device \"nvme\""));
  }
  return r.finish();
}

// DeepSpeed's rule: train_batch_size = micro_batch * accumulation * world_size;
// any two give the third, and all three must agree.
absl::Status resolve_batch(JsonReader& r, JobConfig& cfg, int world_size) {
  std::optional<int64_t> tbs, mb, gas;
  ZEROD_RETURN_IF_ERROR(r.read("train_batch_size", &tbs));
  ZEROD_RETURN_IF_ERROR(r.read("train_micro_batch_size_per_gpu", &mb));
  ZEROD_RETURN_IF_ERROR(r.read("gradient_accumulation_steps", &gas));
  const std::pair<const char*, std::optional<int64_t>*> all[] = {
      {"train_batch_size", &tbs}, {"train_micro_batch_size_per_gpu", &mb}, {"gradient_accumulation_steps", &gas}};
  for (const auto& [key, v] : all) {
    if (*v && **v < 1) return config_error(key, absl::StrCat("must be at least 1, got ", **v));
  }
  const int64_t ws = world_size;
  if (tbs && mb && gas) {
    if (*tbs != *mb * *gas * ws) {
      return config_error("train_batch_size",
                          absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs,
                                       " != train_micro_batch_size_per_gpu ", *mb, " * gradient_accumulation_steps ",
                                       *gas, " * world size ", ws));
    }
  } else if (tbs && mb) {
    if (*tbs % (*mb * ws) != 0) {
      return config_error("train_batch_size", absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs,
                                                           " is not a multiple of train_micro_batch_size_per_gpu ",
                                                           *mb, " * world size ", ws));
    }
    gas = *tbs / (*mb * ws);
  } else if (tbs) {
    if (!gas) gas = 1;
    if (*tbs % (*gas * ws) != 0) {
      return config_error("train_batch_size", absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs,
                                                           " is not a multiple of gradient_accumulation_steps ",
                                                           *gas, " * world size ", ws));
    }
    mb = *tbs / (*gas * ws);
  } else if (mb) {
    if (!gas) gas = 1;
    tbs = *mb * *gas * ws;
  } else {
    return config_error("train_batch_size",
                        "either train_batch_size or train_micro_batch_size_per_gpu must be given");
  }
  if (*mb > INT32_MAX || *gas > INT32_MAX) return config_error("train_batch_size", "batch sizes are too large");
  cfg.train_batch_size = *tbs;
  cfg.micro_batch = static_cast<int>(*mb);
  cfg.grad_accum = static_cast<int>(*gas);
  return absl::OkStatus();
}

}  // namespace

absl::Status apply_override(nlohmann::json& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set '", assignment, "': expected key.path=value, e.g. --set run.steps=50"));
  }
  // Keys and bare words go into the config as they are, and every message
  // that quotes them would fail on bytes that are not UTF-8 text.
  try {
    (void)nlohmann::json(assignment).dump();
  } catch (const nlohmann::json::type_error&) {
    return absl::InvalidArgumentError("--set: an assignment that is not UTF-8 text");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    value = text;  // bare words are strings: --set model.preset=gpt2
  } else {
    ZEROD_ASSIGN_OR_RETURN(value, parse_strict_json(text, absl::StrCat("--set '", assignment, "'")));
  }
  nlohmann::json* node = &root;
  std::vector<std::string> keys = absl::StrSplit(path, '.');
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--set '", assignment, "': empty key in path '", path, "'"));
    }
    if (node->is_null()) *node = nlohmann::json::object();
    if (!node->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("--set '", assignment, "': ",
                                                     i == 0 ? std::string("the config is not a JSON object")
                                                            : absl::StrCat("'", keys[i - 1], "' is not an object")));
    }
    node = &(*node)[keys[i]];
  }
  *node = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> parse_job_config(const nlohmann::json& root, int world_size) {
  if (!root.is_object()) return absl::InvalidArgumentError("the job config must be a JSON object");
  JobConfig cfg;
  JsonReader r(root, "");
  ZEROD_ASSIGN_OR_RETURN(JsonReader model, r.section("model"));
  ZEROD_RETURN_IF_ERROR(check(r.has("model"), r, "model", "required (e.g. {\"preset\": \"gpt2-tiny\"})"));
  ZEROD_RETURN_IF_ERROR(parse_model(model, cfg));
  ZEROD_ASSIGN_OR_RETURN(JsonReader data, r.section("data"));
  ZEROD_RETURN_IF_ERROR(parse_data(data, cfg));
  ZEROD_ASSIGN_OR_RETURN(JsonReader run, r.section("run"));
  ZEROD_RETURN_IF_ERROR(parse_run(run, cfg.run));
  {
    ZEROD_ASSIGN_OR_RETURN(JsonReader ac, r.section("activation_checkpointing"));
    ZEROD_RETURN_IF_ERROR(ac.read("enabled", &cfg.activation_checkpointing));
    ZEROD_RETURN_IF_ERROR(ac.finish());
  }
  ZEROD_RETURN_IF_ERROR(resolve_batch(r, cfg, world_size));
  ZEROD_RETURN_IF_ERROR(r.read("steps_per_print", &cfg.steps_per_print));
  ZEROD_RETURN_IF_ERROR(check(cfg.steps_per_print >= 1, r, "steps_per_print", "must be at least 1"));
  ZEROD_RETURN_IF_ERROR(r.read("wall_clock_breakdown", &cfg.wall_clock_breakdown));
  ZEROD_RETURN_IF_ERROR(r.read("gradient_clipping", &cfg.gradient_clipping));
  ZEROD_RETURN_IF_ERROR(check(cfg.gradient_clipping >= 0, r, "gradient_clipping", "must not be negative"));
  ZEROD_ASSIGN_OR_RETURN(JsonReader opt, r.section("optimizer"));
  ZEROD_RETURN_IF_ERROR(parse_optimizer(opt, cfg.optimizer));
  ZEROD_ASSIGN_OR_RETURN(JsonReader sched, r.section("scheduler"));
  ZEROD_RETURN_IF_ERROR(parse_scheduler(sched, cfg.scheduler));
  bool bf16 = false, fp16 = false;
  {
    ZEROD_ASSIGN_OR_RETURN(JsonReader b, r.section("bf16"));
    ZEROD_RETURN_IF_ERROR(b.read("enabled", &bf16));
    ZEROD_RETURN_IF_ERROR(b.finish());
  }
  ZEROD_ASSIGN_OR_RETURN(JsonReader f, r.section("fp16"));
  ZEROD_RETURN_IF_ERROR(parse_fp16(f, &fp16, cfg.fp16));
  if (bf16 && fp16) return config_error("bf16", "bf16 and fp16 cannot both be enabled");
  cfg.precision = bf16 ? DType::kBF16 : fp16 ? DType::kF16 : DType::kF32;
  ZEROD_ASSIGN_OR_RETURN(JsonReader zero, r.section("zero_optimization"));
  ZEROD_RETURN_IF_ERROR(parse_zero(zero, cfg.zero));
  {
    ZEROD_ASSIGN_OR_RETURN(JsonReader aio, r.section("aio"));
    ZEROD_RETURN_IF_ERROR(aio.read("block_size", &cfg.aio_block_size));
    ZEROD_RETURN_IF_ERROR(check(cfg.aio_block_size >= 4096 && cfg.aio_block_size % 4096 == 0, aio, "block_size",
                                "must be a positive multiple of 4096 bytes (direct I/O)"));
    ZEROD_RETURN_IF_ERROR(aio.read("queue_depth", &cfg.aio_queue_depth));
    ZEROD_RETURN_IF_ERROR(check(cfg.aio_queue_depth >= 1, aio, "queue_depth", "must be positive"));
    ZEROD_RETURN_IF_ERROR(aio.finish());
  }
  ZEROD_RETURN_IF_ERROR(r.finish());
  return cfg;
}

absl::StatusOr<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides,
                                          int world_size) {
  const std::optional<std::string> text = read_whole_file(path);
  if (!text) return absl::NotFoundError(absl::StrCat("config file '", path, "' cannot be opened"));
  ZEROD_ASSIGN_OR_RETURN(nlohmann::json root, parse_strict_json(*text, absl::StrCat("config file '", path, "'")));
  for (const std::string& o : overrides) ZEROD_RETURN_IF_ERROR(apply_override(root, o));
  auto cfg = parse_job_config(root, world_size);
  if (!cfg.ok()) {
    return absl::Status(cfg.status().code(), absl::StrCat("config file '", path, "': ", cfg.status().message()));
  }
  return cfg;
}

}  // namespace zerod
