#include "runtime/config/job_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/config/json_reader.h"

namespace zerod {
namespace {

// A seed: any integer from 0 to 2^63 - 1.
void read_seed(JsonReader& r, uint64_t* seed) {
  int64_t v = static_cast<int64_t>(*seed);
  if (r.read("seed", &v) && r.check(v >= 0, "seed", absl::StrCat("must not be negative, got ", v))) {
    *seed = static_cast<uint64_t>(v);
  }
}

// Reads a string key that must be one of `names` (compared ignoring case
// when `any_case`); stores the matching value.
template <class Enum>
bool read_enum(JsonReader& r, const char* key, std::initializer_list<std::pair<const char*, Enum>> names, Enum* out,
               bool any_case = false) {
  if (!r.has(key)) {
    r.raw(key);
    return true;
  }
  std::string s;
  if (!r.read(key, &s)) return false;
  std::string expected;
  for (const auto& [name, value] : names) {
    if (any_case ? absl::EqualsIgnoreCase(s, name) : s == name) {
      *out = value;
      return true;
    }
    absl::StrAppend(&expected, expected.empty() ? "" : ", ", name);
  }
  r.problem(key, absl::StrCat("'", s, "' is not one of: ", expected));
  return false;
}

// PEFT's target_modules for a model of architecture `arch`; absent, its
// defaults (GPT-2's c_attn, a Llama's q_proj and v_proj).
void read_lora_targets(JsonReader& r, LoraConfig& c, Arch arch) {
  const nlohmann::json* t = r.raw("target_modules");
  if (!t) {
    if (arch == Arch::kLlama) c.targets = {true, false, true, false, false, false, false};
    return;
  }
  std::vector<std::string> names;
  if (t->is_string()) {
    names.push_back(t->get<std::string>());
  } else if (t->is_array() && std::ranges::all_of(*t, [](const nlohmann::json& v) { return v.is_string(); })) {
    for (const auto& v : *t) names.push_back(v.get<std::string>());
  } else {
    r.problem("target_modules", absl::StrCat("expected a list of module names, got ", t->dump()));
    return;
  }
  c.targets.fill(false);
  const int n = lora_targets_of(arch);
  for (const std::string& name : names) {
    if (name == "all-linear") {
      std::fill_n(c.targets.begin(), n, true);
      continue;
    }
    int found = -1;
    for (int k = 0; k < n; ++k) {
      if (name == lora_target_name(arch, k)) found = k;
    }
    if (found < 0) {
      std::string known;
      for (int k = 0; k < n; ++k) absl::StrAppend(&known, lora_target_name(arch, k), ", ");
      r.problem("target_modules",
                absl::StrCat("'", name, "' is not one of ", arch == Arch::kLlama ? "a Llama's" : "GPT-2's",
                             " products: ", known, "all-linear"));
      return;
    }
    c.targets[found] = true;
  }
}

void parse_lora(JsonReader r, ConfigReading& reading, JobConfig& cfg) {
  LoraJobConfig l;
  LoraConfig& a = l.adapters;
  r.read("r", &a.r);
  // PEFT's lora_alpha and lora_dropout, or zerod's shorter alpha and dropout.
  for (auto [peft, own, into] :
       {std::tuple{"lora_alpha", "alpha", &a.alpha}, std::tuple{"lora_dropout", "dropout", &a.dropout}}) {
    if (r.has(peft) && r.has(own)) r.problem(own, absl::StrCat("give ", peft, " or ", own, ", not both"));
    r.read(peft, into);
    r.read(own, into);
  }
  r.read("use_rslora", &a.use_rslora);
  read_lora_targets(r, a, cfg.model.arch);
  std::string bias = "none";
  if (r.read("bias", &bias))
    r.check(bias == "none", "bias", absl::StrCat("only 'none' is supported, got '", bias, "'"));
  std::string quant = "none";
  if (r.read("base_quant", &quant)) {
    r.check(quant == "none" || quant == "nf4", "base_quant", absl::StrCat("'", quant, "' is not one of: none, nf4"));
  }
  l.nf4_base = quant == "nf4";
  r.read("init_from", &l.init_from);
  r.finish();
  if (absl::Status s = validate_lora_config(a, cfg.model.arch); !s.ok()) {
    reading.add_text("model.lora", std::string(s.message()));
  }
  cfg.lora = std::move(l);
}

void parse_model(JsonReader r, ConfigReading& reading, JobConfig& cfg) {
  cfg.preset = "custom";
  r.read("preset", &cfg.preset);
  if (cfg.preset != "custom") {
    absl::StatusOr<GptConfig> preset = gpt_preset(cfg.preset);
    if (preset.ok()) {
      cfg.model = *preset;
    } else {
      r.problem("preset", std::string(preset.status().message()));
    }
  }
  GptConfig& m = cfg.model;
  r.read("init_from", &cfg.init_from);
  r.read("n_layer", &m.n_layer);
  r.read("n_head", &m.n_head);
  r.read("n_embd", &m.n_embd);
  r.read("vocab_size", &m.vocab_size);
  r.read("block_size", &m.block_size);
  read_enum<Arch>(r, "arch", {{"gpt2", Arch::kGpt2}, {"llama", Arch::kLlama}}, &m.arch);
  r.read("n_kv_head", &m.n_kv_head);
  r.read("ffn_hidden", &m.ffn_hidden);
  r.read("rope_theta", &m.rope_theta);
  r.read("norm_eps", &m.norm_eps);
  r.read("tie_embeddings", &m.tie_embeddings);
  r.read("qkv_bias", &m.qkv_bias);
  if (r.has("rope_scaling")) {  // {"factor": 0}: none
    JsonReader rs = r.section("rope_scaling");
    RopeScaling& sc = m.rope_scaling;
    rs.read("factor", &sc.factor);
    rs.read("low_freq_factor", &sc.low_freq_factor);
    rs.read("high_freq_factor", &sc.high_freq_factor);
    rs.read("original_max_position_embeddings", &sc.original_max_position);
    rs.finish();
  }
  if (r.has("lora")) parse_lora(r.section("lora"), reading, cfg);
  r.finish();
  if (cfg.preset == "custom" && m.n_layer == 0) {
    reading.add("model",
                "preset 'custom' needs n_layer, n_head, n_embd, vocab_size and block_size (and a Llama "
                "ffn_hidden), or an init_from whose config.json gives them");
  } else if (absl::Status s = validate_gpt_config(m); !s.ok()) {
    reading.add_text("model", std::string(s.message()));
  } else if (cfg.lora) {
    if (absl::Status r = validate_lora_rank(cfg.lora->adapters, m); !r.ok()) {
      reading.add_text("model.lora", std::string(r.message()));
    }
  }
}

// data.eval (EvalDataConfig).
void parse_eval_data(JsonReader e, DataConfig& d) {
  EvalDataConfig& ev = d.eval.emplace();
  ev.kind = d.kind;
  read_enum<DataKind>(e, "kind", {{"text", DataKind::kText}, {"tokens", DataKind::kTokens}}, &ev.kind);
  e.read("path", &ev.path);
  e.read("fraction", &ev.fraction);
  e.finish();
  if (e.has("fraction")) {
    e.check(ev.fraction > 0 && ev.fraction < 1, "fraction",
            absl::StrCat("must be in (0, 1), a share of data's windows; got ", ev.fraction));
    e.check(!e.has("path") && !e.has("kind"), "fraction",
            "takes the held-out windows from data itself: give data.eval.path (and kind) or data.eval.fraction, "
            "not both");
  } else {
    e.check(!ev.path.empty(), "path", "required: a held-out dataset, or data.eval.fraction of data's windows");
    e.check(ev.kind != DataKind::kSynthetic, "kind",
            "required with synthetic data ('tokens' or 'text': the held-out file's kind); or hold out "
            "data.eval.fraction of the synthetic task's windows");
  }
}

// data.sources (DataSource): each {"path", "weight"}, at least one, not
// every weight 0.
void parse_sources(JsonReader& r, ConfigReading& reading, DataConfig& d) {
  const nlohmann::json* list = r.raw("sources");
  if (list == nullptr || list->is_null()) return;
  if (!list->is_array() || list->empty()) {
    r.problem("sources", "must be a list of {\"path\", \"weight\"}, at least one");
    return;
  }
  double total = 0;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& each = (*list)[i];
    const std::string at = absl::StrCat(r.key_path("sources"), "[", i, "]");
    if (!each.is_object()) {
      reading.add(at, "must be an object {\"path\", \"weight\"}");
      continue;
    }
    JsonReader e(each, at, reading);
    DataSource& s = d.sources.emplace_back();
    e.read("path", &s.path);
    e.check(!s.path.empty(), "path", "required: a file or glob of data.kind");
    if (e.read("weight", &s.weight)) {
      e.check(std::isfinite(s.weight) && s.weight >= 0, "weight",
              absl::StrCat("must be a number at least 0, the source's share of the weights' sum; got ", s.weight));
    }
    e.check(e.has("weight"), "weight", "required: the source's share of the weights' sum");
    e.finish();
    if (std::isfinite(s.weight) && s.weight > 0) total += s.weight;
  }
  r.check(total > 0, "sources", "no weight is above 0: no source to draw windows from");
}

void parse_data(JsonReader r, ConfigReading& reading, JobConfig& cfg) {
  DataConfig& d = cfg.data;
  read_enum<DataKind>(r, "kind",
                      {{"synthetic", DataKind::kSynthetic}, {"text", DataKind::kText}, {"tokens", DataKind::kTokens}},
                      &d.kind);
  r.read("path", &d.path);
  // The model's positions; a Llama's up to 2048 (its block_size is its
  // max_position_embeddings, 131072 for Llama 3).
  d.seq_len = cfg.model.llama() ? std::min(cfg.model.block_size, 2048) : cfg.model.block_size;
  r.read("seq_len", &d.seq_len);
  read_seed(r, &d.seed);
  if (r.has("eval")) parse_eval_data(r.section("eval"), d);
  parse_sources(r, reading, d);
  r.finish();
  if (!d.sources.empty()) {
    r.check(!r.has("path"), "path", "and data.sources both name the data: give one");
    r.check(d.kind != DataKind::kSynthetic, "sources", "needs data.kind 'text' or 'tokens', the sources' kind");
    r.check(!d.eval || d.eval->fraction == 0, "eval",
            "data.eval.fraction splits one dataset, not data.sources: give data.eval.path");
  }
  r.check(d.kind == DataKind::kSynthetic || !d.path.empty() || !d.sources.empty(), "path",
          "required for data.kind 'text' and 'tokens' (or data.sources)");
  r.check(d.kind != DataKind::kSynthetic || !r.has("path"), "path",
          "is not read by data.kind 'synthetic' (the task is generated from data.seed)");
  r.check(d.seq_len >= 1 && d.seq_len <= cfg.model.block_size, "seq_len",
          absl::StrCat("must be in [1, model.block_size = ", cfg.model.block_size, "], got ", d.seq_len));
}

void parse_run(JsonReader r, RunConfig& run) {
  if (r.read("steps", &run.steps))
    r.check(run.steps >= 1, "steps", absl::StrCat("must be at least 1, got ", run.steps));
  read_seed(r, &run.seed);
  if (r.read("device", &run.device)) {
    r.check(run.device == "cpu" || run.device == "cuda" || run.device == "auto", "device",
            absl::StrCat("'", run.device, "' is not one of: cpu, cuda, auto"));
  }
  {
    JsonReader c = r.section("checkpoint");
    c.read("dir", &run.checkpoint.dir);
    c.read("interval", &run.checkpoint.interval);
    c.read("keep", &run.checkpoint.keep);
    c.read("async", &run.checkpoint.async);
    c.read("keep_best", &run.checkpoint.keep_best);
    c.finish();
    c.check(run.checkpoint.interval >= 0, "interval", "must not be negative (0 saves only at the end)");
    c.check(run.checkpoint.keep >= 1, "keep", "must be at least 1");
    c.check(!run.checkpoint.dir || !run.checkpoint.dir->empty(), "dir", "must not be empty");
  }
  {
    JsonReader e = r.section("eval");
    e.read("interval", &run.eval.interval);
    e.read("batches", &run.eval.batches);
    e.read("patience", &run.eval.patience);
    e.finish();
    e.check(run.eval.interval >= 0, "interval", "must not be negative (0 evaluates at the end only)");
    e.check(run.eval.batches >= 0, "batches", "must not be negative (0 evaluates all of data.eval)");
    e.check(run.eval.patience >= 0, "patience", "must not be negative (0 never stops early)");
    e.check(run.eval.patience == 0 || run.eval.interval > 0, "patience",
            "counts evaluations during the run: it needs run.eval.interval");
  }
  r.read("resume", &run.resume);
  r.check(!run.resume || !run.resume->empty(), "resume", "must be \"latest\" or a checkpoint directory");
  r.check(run.resume != "latest" || run.checkpoint.dir, "resume", "\"latest\" needs run.checkpoint.dir to look in");
  r.read_bytes("host_memory_limit", &run.host_memory_limit);
  r.read_bytes("gpu_memory_limit", &run.gpu_memory_limit);
  if (r.read("threads", &run.threads)) {
    r.check(run.threads >= 0, "threads", "must not be negative (0 shares the node's CPUs among its ranks)");
  }
  r.read("collective_timeout_s", &run.collective_timeout_s);
  r.check(run.collective_timeout_s > 0, "collective_timeout_s", "must be positive");
  r.read("tensorboard_dir", &run.tensorboard_dir);
  r.check(!run.tensorboard_dir || !run.tensorboard_dir->empty(), "tensorboard_dir", "must not be empty");
  read_enum<LogFormat>(r, "log_format", {{"text", LogFormat::kText}, {"json", LogFormat::kJson}}, &run.log_format);
  {
    JsonReader s = r.section("sample");
    s.read("tokens", &run.sample_tokens);
    s.read("temperature", &run.sample_temperature);
    s.finish();
    s.check(run.sample_tokens >= 0, "tokens", "must not be negative");
    s.check(run.sample_temperature >= 0, "temperature", "must not be negative");
  }
  r.finish();
}

void parse_monitor(JsonReader r, MonitorConfig& m) {
  r.read("enabled", &m.enabled);
  r.read("output_path", &m.output_path);
  if (r.read("job_name", &m.job_name)) r.check(!m.job_name.empty(), "job_name", "must not be empty");
  r.finish();
}

// DeepSpeed's Adam is AdamW unless adam_w_mode is false; AdamW is always.
void parse_optimizer(JsonReader r, OptimizerConfig& o) {
  OptimizerType type = o.type;
  const bool known = read_enum<OptimizerType>(
      r, "type",
      {{"Adam", OptimizerType::kAdam}, {"AdamW", OptimizerType::kAdamW}, {"AdamW8bit", OptimizerType::kAdamW8bit}},
      &type, /*any_case=*/true);
  JsonReader p = r.section("params");
  if (!known) {  // another optimizer's parameters are moot
    p.finish_unjudged();
    r.finish();
    return;
  }
  if (p.read("lr", &o.lr)) p.check(o.lr >= 0, "lr", absl::StrCat("must not be negative, got ", o.lr));
  if (const nlohmann::json* betas = p.raw("betas")) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number()) {
      p.problem("betas", absl::StrCat("expected [beta1, beta2], got ", betas->dump()));
    } else {
      o.beta1 = (*betas)[0].get<double>();
      o.beta2 = (*betas)[1].get<double>();
      p.check(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "betas", "each beta must be in [0, 1)");
    }
  }
  if (p.read("eps", &o.eps)) p.check(o.eps > 0, "eps", "must be positive");
  if (p.read("weight_decay", &o.weight_decay)) p.check(o.weight_decay >= 0, "weight_decay", "must not be negative");
  bool adam_w_mode = true;
  p.read("adam_w_mode", &adam_w_mode);
  p.read("bias_correction", &o.bias_correction);
  p.finish();
  o.type = type == OptimizerType::kAdam && adam_w_mode ? OptimizerType::kAdamW : type;
  r.finish();
}

void parse_scheduler(JsonReader r, SchedulerConfig& s) {
  read_enum<SchedulerType>(r, "type",
                           {{"WarmupLR", SchedulerType::kWarmupLR},
                            {"WarmupDecayLR", SchedulerType::kWarmupDecayLR},
                            {"WarmupCosineLR", SchedulerType::kWarmupCosineLR}},
                           &s.type);
  r.check(s.type != SchedulerType::kNone || !r.has("params") || r.has("type"), "type",
          "required when scheduler.params is given");
  JsonReader p = r.section("params");
  if (s.type == SchedulerType::kNone && r.has("type")) {  // refused: another schedule's parameters are moot
    p.finish_unjudged();
    r.finish();
    return;
  }
  if (p.read("warmup_num_steps", &s.warmup_num_steps)) {
    p.check(s.warmup_num_steps >= 0, "warmup_num_steps", "must not be negative");
  }
  read_enum<WarmupType>(p, "warmup_type", {{"log", WarmupType::kLog}, {"linear", WarmupType::kLinear}}, &s.warmup_type);
  if (s.type == SchedulerType::kWarmupCosineLR) {
    p.read("warmup_min_ratio", &s.warmup_min_ratio);
    p.read("cos_min_ratio", &s.cos_min_ratio);
    // Fractions of the optimizer's lr: where warmup starts, where the cosine ends.
    for (const auto& [key, v] :
         {std::pair{"warmup_min_ratio", s.warmup_min_ratio}, {"cos_min_ratio", s.cos_min_ratio}}) {
      p.check(v >= 0 && v <= 1, key, absl::StrCat("must be in [0, 1], got ", v));
    }
  } else {
    p.read("warmup_min_lr", &s.warmup_min_lr);
    p.read("warmup_max_lr", &s.warmup_max_lr);
    p.check(s.warmup_min_lr >= 0, "warmup_min_lr", "must not be negative");
    p.check(s.warmup_max_lr >= 0, "warmup_max_lr", "must not be negative");
  }
  if (s.type == SchedulerType::kWarmupDecayLR || s.type == SchedulerType::kWarmupCosineLR) {
    if (p.check(p.has("total_num_steps"), "total_num_steps", "required by this scheduler") &&
        p.read("total_num_steps", &s.total_num_steps)) {
      p.check(s.total_num_steps >= 1, "total_num_steps", "must be at least 1");
    }
  }
  p.finish();
  r.finish();
}

void parse_fp16(JsonReader r, bool* enabled, LossScaleConfig& f) {
  r.read("enabled", enabled);
  if (r.read("loss_scale", &f.loss_scale)) {
    r.check(f.loss_scale >= 0, "loss_scale", "must not be negative (0 is dynamic)");
  }
  if (r.read("initial_scale_power", &f.initial_scale_power)) {
    r.check(f.initial_scale_power >= 0 && f.initial_scale_power <= 126, "initial_scale_power", "must be in [0, 126]");
  }
  if (r.read("loss_scale_window", &f.loss_scale_window)) {
    r.check(f.loss_scale_window >= 1, "loss_scale_window", "must be at least 1");
  }
  if (r.read("hysteresis", &f.hysteresis)) r.check(f.hysteresis >= 1, "hysteresis", "must be at least 1");
  r.read("consecutive_hysteresis", &f.consecutive_hysteresis);
  if (r.read("min_loss_scale", &f.min_loss_scale)) r.check(f.min_loss_scale > 0, "min_loss_scale", "must be positive");
  r.finish();
}

void parse_offload(JsonReader& r, OffloadConfig& o) {
  read_enum<OffloadDevice>(
      r, "device", {{"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}},
      &o.device);
  r.read("nvme_path", &o.nvme_path);
  r.read("pin_memory", &o.pin_memory);
  if (r.read("buffer_count", &o.buffer_count)) r.check(o.buffer_count >= 1, "buffer_count", "must be at least 1");
  r.finish();
}

// DeepSpeed's older `cpu_offload: true` for `offload.device: "cpu"`; both at once is refused, as there.
void read_cpu_offload(JsonReader& zero, const char* old_key, const char* section, OffloadConfig& o) {
  bool old = false;
  if (!zero.has(old_key) || !zero.read(old_key, &old) || !old) return;
  if (zero.check(!zero.has(section), old_key,
                 absl::StrCat("is the older spelling of ", section, ".device; give one"))) {
    o.device = OffloadDevice::kCpu;
  }
}

constexpr std::pair<const char*, MicroBatchGrads> kMicroBatchGrads[] = {
    {"auto", MicroBatchGrads::kAuto}, {"fp32", MicroBatchGrads::kF32}, {"compute", MicroBatchGrads::kCompute}};
constexpr std::pair<const char*, Accumulation> kAccumulation[] = {
    {"micro_batch", Accumulation::kMicroBatch}, {"layer", Accumulation::kLayer}, {"auto", Accumulation::kAuto}};

void parse_zero(JsonReader r, ZeroConfig& z) {
  if (r.read("stage", &z.stage)) {
    r.check(z.stage >= 0 && z.stage <= 3, "stage", absl::StrCat("must be 0, 1, 2 or 3, got ", z.stage));
  }
  // Element counts under either of DeepSpeed's spellings; 0 means something
  // only for the prefetch (none) and the persistence threshold (nothing
  // persists).
  const std::tuple<const char*, const char*, int64_t*, int64_t> sizes[] = {
      {"reduce_bucket_size", nullptr, &z.reduce_bucket_size, 1},
      {"stage3_prefetch_bucket_size", "prefetch_bucket_size", &z.stage3_prefetch_bucket_size, 0},
      {"stage3_param_persistence_threshold", "param_persistence_threshold", &z.stage3_param_persistence_threshold, 0},
      {"sub_group_size", nullptr, &z.sub_group_size, 1}};
  for (const auto& [key, other, out, least] : sizes) {
    const char* given = other && r.has(other) ? other : key;
    if (other && r.has(key) && r.has(other)) {
      r.raw(key);
      r.raw(other);
      r.problem(other, absl::StrCat("is another spelling of ", r.key_path(key), "; give one"));
      continue;
    }
    if (r.read(given, out)) {
      r.check(*out >= least, given,
              least == 0 ? absl::StrCat("must not be negative, got ", *out)
                         : absl::StrCat("must be at least 1, got ", *out));
    }
  }
  r.read("overlap_comm", &z.overlap_comm);
  if (read_enum<MicroBatchGrads>(r, "micro_batch_grads",
                                 {kMicroBatchGrads[0], kMicroBatchGrads[1], kMicroBatchGrads[2]},
                                 &z.micro_batch_grads)) {
    // Stages 0 and 1 sum the micro-batches in backward's own buffer.
    r.check(z.micro_batch_grads != MicroBatchGrads::kCompute || z.stage >= 2, "micro_batch_grads",
            absl::StrCat("'compute' needs stage 2 or 3, but stage is ", z.stage));
  }
  read_enum<Accumulation>(r, "accumulation", {kAccumulation[0], kAccumulation[1], kAccumulation[2]}, &z.accumulation);
  JsonReader oo = r.section("offload_optimizer");
  oo.read("super_offload", &z.offload_optimizer.super_offload);
  parse_offload(oo, z.offload_optimizer);
  JsonReader op = r.section("offload_param");
  parse_offload(op, z.offload_param);
  read_cpu_offload(r, "cpu_offload", "offload_optimizer", z.offload_optimizer);
  read_cpu_offload(r, "cpu_offload_param", "offload_param", z.offload_param);
  op.check(z.offload_param.device == OffloadDevice::kNone || z.stage == 3, "device",
           absl::StrCat("offloading parameters needs stage 3, but stage is ", z.stage));
  // The update runs during backward only where the host adds each unit's
  // gradients (into memory or a file).
  const bool host_update = z.offload_optimizer.device != OffloadDevice::kNone && z.stage >= 2;
  oo.check(!z.offload_optimizer.super_offload || host_update, "super_offload",
           "needs stage 2 or 3 with offload_optimizer.device \"cpu\" or \"nvme\"");
  for (const auto& [reader, o] : {std::pair{&oo, &z.offload_optimizer}, std::pair{&op, &z.offload_param}}) {
    reader->check(o->device != OffloadDevice::kNvme || o->nvme_path.has_value(), "nvme_path",
                  "is needed with device \"nvme\"");
  }
  r.finish();
}

// DeepSpeed's rule: train_batch_size = micro_batch * accumulation * world_size;
// any two give the third, and all three must agree. "auto" takes the
// Hugging Face Trainer's: the micro-batch and accumulation filled in, the
// global batch derived from them.
void resolve_batch(JsonReader& r, JobConfig& cfg, int world_size) {
  std::optional<int64_t> tbs, mb, gas;
  const bool tbs_auto = r.is_auto("train_batch_size");
  if (!tbs_auto) r.read("train_batch_size", &tbs);
  r.read("train_micro_batch_size_per_gpu", &mb);
  r.read("gradient_accumulation_steps", &gas);
  const std::pair<const char*, std::optional<int64_t>*> all[] = {
      {"train_batch_size", &tbs}, {"train_micro_batch_size_per_gpu", &mb}, {"gradient_accumulation_steps", &gas}};
  bool ok = true;
  for (const auto& [key, v] : all) {
    if (*v && **v < 1) ok = r.check(false, key, absl::StrCat("must be at least 1, got ", **v));
  }
  if (!ok) return;
  const int64_t ws = world_size;
  if (tbs && mb && gas) {
    if (*tbs != *mb * *gas * ws) {
      r.problem("train_batch_size",
                absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs, " != train_micro_batch_size_per_gpu ",
                             *mb, " * gradient_accumulation_steps ", *gas, " * world size ", ws));
      return;
    }
  } else if (tbs && mb) {
    if (*tbs % (*mb * ws) != 0) {
      r.problem("train_batch_size",
                absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs,
                             " is not a multiple of train_micro_batch_size_per_gpu ", *mb, " * world size ", ws));
      return;
    }
    gas = *tbs / (*mb * ws);
  } else if (tbs) {
    if (!gas) gas = 1;
    if (*tbs % (*gas * ws) != 0) {
      r.problem("train_batch_size",
                absl::StrCat("inconsistent batch sizes: train_batch_size ", *tbs,
                             " is not a multiple of gradient_accumulation_steps ", *gas, " * world size ", ws));
      return;
    }
    mb = *tbs / (*gas * ws);
  } else if (mb) {
    if (!gas) gas = 1;
    tbs = *mb * *gas * ws;
    if (tbs_auto) r.note_filled("train_batch_size", *tbs);
  } else {
    r.problem("train_batch_size", "either train_batch_size or train_micro_batch_size_per_gpu must be given");
    return;
  }
  if (!r.check(*mb <= INT32_MAX && *gas <= INT32_MAX, "train_batch_size", "batch sizes are too large")) return;
  cfg.train_batch_size = *tbs;
  cfg.micro_batch = static_cast<int>(*mb);
  cfg.grad_accum = static_cast<int>(*gas);
}

// A dtype key of gradients, which zerod accumulates and reduces in fp32
// whatever the training precision: fp32 (or null) is honoured.
void read_gradient_dtype(JsonReader& r, const char* key) {
  std::optional<std::string> name;
  if (!r.read(key, &name) || !name) return;
  for (const char* fp32 : {"fp32", "float32", "float"}) {
    if (absl::EqualsIgnoreCase(*name, fp32)) return;
  }
  for (const char* other : {"bf16", "bfloat16", "fp16", "float16", "half"}) {
    if (absl::EqualsIgnoreCase(*name, other)) {
      r.problem(key, absl::StrCat("'", *name,
                                  "' asks for gradients in 16 bits; zerod accumulates and reduces them in "
                                  "fp32 (\"fp32\" or null is accepted)"));
      return;
    }
  }
  r.problem(key, absl::StrCat("'", *name, "' is not one of: fp32, bf16, fp16"));
}

// What "auto" stands for, as the Hugging Face Trainer fills it in with its
// default arguments (REFERENCES.md), from the model and the run read so far.
std::optional<nlohmann::json> trainer_default(const std::string& path, const JobConfig& cfg) {
  const double hidden = cfg.model.n_embd;
  if (path == "train_micro_batch_size_per_gpu") return 8;
  if (path == "gradient_accumulation_steps") return 1;
  if (path == "gradient_clipping") return 1.0;
  if (path == "optimizer.params.lr") return 5e-5;
  if (path == "optimizer.params.betas") return nlohmann::json::array({0.9, 0.999});
  if (path == "optimizer.params.eps") return 1e-8;
  if (path == "optimizer.params.weight_decay") return 0.0;
  if (path == "scheduler.params.warmup_min_lr") return 0.0;
  if (path == "scheduler.params.warmup_max_lr") return cfg.optimizer.lr;
  if (path == "scheduler.params.warmup_num_steps") return 0;
  if (path == "scheduler.params.total_num_steps") return cfg.run.steps;
  if (path == "fp16.enabled" || path == "bf16.enabled" || path == "bfloat16.enabled") return false;
  if (path == "zero_optimization.reduce_bucket_size") return static_cast<int64_t>(hidden * hidden);
  if (path == "zero_optimization.stage3_prefetch_bucket_size" || path == "zero_optimization.prefetch_bucket_size") {
    return static_cast<int64_t>(0.9 * hidden * hidden);
  }
  if (path == "zero_optimization.stage3_param_persistence_threshold" ||
      path == "zero_optimization.param_persistence_threshold") {
    return static_cast<int64_t>(10 * hidden);
  }
  return std::nullopt;
}

}  // namespace

const char* micro_batch_grads_name(MicroBatchGrads m) {
  for (const auto& [name, value] : kMicroBatchGrads) {
    if (value == m) return name;
  }
  return "?";
}

std::string accumulation_line(const JobConfig& cfg) {
  const std::string why = cfg.accumulation_why.empty() ? "" : absl::StrCat(" | auto: ", cfg.accumulation_why);
  if (cfg.zero.accumulation != Accumulation::kLayer) {
    return why.empty() ? ""
                       : absl::StrCat("micro-batch order (accumulation micro_batch): each through every layer", why);
  }
  return absl::StrCat("micro-batch order (accumulation layer): each layer's weights once a step up and once down, ",
                      "through the ", cfg.grad_accum, " micro-batches in turn, whose block inputs are all kept", why);
}

const char* accumulation_name(Accumulation a) {
  for (const auto& [name, value] : kAccumulation) {
    if (value == a) return name;
  }
  return "?";
}

absl::StatusOr<JobConfig> parse_job_config(const nlohmann::json& root, int world_size) {
  if (!root.is_object()) return absl::InvalidArgumentError("the job config must be a JSON object");
  JobConfig cfg;
  ConfigReading reading([&cfg](const std::string& path) { return trainer_default(path, cfg); });
  JsonReader r(root, "", reading);
  r.check(r.has("model"), "model", "required (e.g. {\"preset\": \"gpt2-tiny\"})");
  parse_model(r.section("model"), reading, cfg);
  parse_data(r.section("data"), reading, cfg);
  parse_run(r.section("run"), cfg.run);
  if (!cfg.data.eval) {
    const nlohmann::json* run = root.contains("run") && root["run"].is_object() ? &root["run"] : nullptr;
    if (run && run->contains("eval") && !(*run)["eval"].is_null()) {
      reading.add("run.eval", "evaluates data.eval, which the config does not give");
    }
    if (cfg.run.checkpoint.keep_best) {
      reading.add("run.checkpoint.keep_best", "keeps the checkpoint of the lowest eval loss: it needs data.eval");
    }
  }
  if (cfg.run.checkpoint.keep_best && !cfg.run.checkpoint.dir) {
    reading.add("run.checkpoint.keep_best", "needs run.checkpoint.dir to keep the best checkpoint in");
  }
  {
    JsonReader ac = r.section("activation_checkpointing");
    ac.read("enabled", &cfg.activation_checkpointing);
    ac.read("cpu_checkpointing", &cfg.cpu_checkpointing);
    ac.finish();
  }
  resolve_batch(r, cfg, world_size);
  if (r.read("steps_per_print", &cfg.steps_per_print)) {
    r.check(cfg.steps_per_print >= 1, "steps_per_print", "must be at least 1");
  }
  r.read("wall_clock_breakdown", &cfg.wall_clock_breakdown);
  {
    // DeepSpeed turns the breakdown on with its flops profiler.
    JsonReader fp = r.section("flops_profiler");
    bool profiler = false;
    fp.read("enabled", &profiler);
    fp.finish();
    cfg.wall_clock_breakdown = cfg.wall_clock_breakdown || profiler;
  }
  if (r.read("gradient_clipping", &cfg.gradient_clipping)) {
    r.check(cfg.gradient_clipping >= 0, "gradient_clipping", "must not be negative");
  }
  parse_optimizer(r.section("optimizer"), cfg.optimizer);
  parse_scheduler(r.section("scheduler"), cfg.scheduler);
  bool bf16 = false, old_bf16 = false, fp16 = false;
  {
    JsonReader b = r.section("bf16");
    b.read("enabled", &bf16);
    b.finish();
    JsonReader old = r.section("bfloat16");  // DeepSpeed's older name; bf16 wins where both are given
    old.read("enabled", &old_bf16);
    old.finish();
    if (!r.has("bf16")) bf16 = old_bf16;
  }
  parse_fp16(r.section("fp16"), &fp16, cfg.fp16);
  r.check(!(bf16 && fp16), "bf16", "bf16 and fp16 cannot both be enabled");
  cfg.precision = bf16 ? DType::kBF16 : fp16 ? DType::kF16 : DType::kF32;
  read_gradient_dtype(r, "communication_data_type");
  {
    JsonReader dt = r.section("data_types");
    read_gradient_dtype(dt, "grad_accum_dtype");
    dt.finish();
  }
  parse_zero(r.section("zero_optimization"), cfg.zero);
  if (cfg.zero.accumulation == Accumulation::kLayer && !cfg.activation_checkpointing) {
    reading.add("zero_optimization.accumulation",
                "'layer' keeps each micro-batch's block inputs for its backward: it needs "
                "activation_checkpointing.enabled");
  }
  parse_monitor(r.section("tensorboard"), cfg.tensorboard);
  parse_monitor(r.section("csv_monitor"), cfg.csv_monitor);
  r.check(!(cfg.run.tensorboard_dir && cfg.tensorboard.enabled), "tensorboard",
          "enabled with run.tensorboard_dir too: give one of them");
  {
    JsonReader aio = r.section("aio");
    if (aio.read("block_size", &cfg.aio_block_size)) {
      aio.check(cfg.aio_block_size >= 4096 && cfg.aio_block_size % 4096 == 0, "block_size",
                "must be a positive multiple of 4096 bytes (direct I/O)");
    }
    if (aio.read("queue_depth", &cfg.aio_queue_depth))
      aio.check(cfg.aio_queue_depth >= 1, "queue_depth", "must be positive");
    aio.finish();
  }
  r.finish();
  ZEROD_RETURN_IF_ERROR(reading.status());
  cfg.auto_filled = reading.filled();
  return cfg;
}

namespace {

std::optional<std::string> monitor_dir(const MonitorConfig& m) {
  if (!m.enabled) return std::nullopt;
  return (std::filesystem::path(m.output_path) / m.job_name).string();
}

}  // namespace

std::optional<std::string> tensorboard_log_dir(const JobConfig& cfg) {
  return cfg.run.tensorboard_dir ? cfg.run.tensorboard_dir : monitor_dir(cfg.tensorboard);
}

std::optional<std::string> csv_log_dir(const JobConfig& cfg) { return monitor_dir(cfg.csv_monitor); }

}  // namespace zerod
