#include "runtime/telemetry/run_output.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerod {
namespace {

const char* scheduler_name(SchedulerType t) {
  switch (t) {
    case SchedulerType::kNone:
      return "none";
    case SchedulerType::kWarmupLR:
      return "WarmupLR";
    case SchedulerType::kWarmupDecayLR:
      return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR:
      return "WarmupCosineLR";
  }
  return "?";
}

const char* optimizer_name(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdamW:
      return "AdamW";
    case OptimizerType::kAdam:
      return "Adam";
    case OptimizerType::kAdamW8bit:
      return "AdamW8bit";
  }
  return "?";
}

const char* data_kind_name(DataKind k) {
  switch (k) {
    case DataKind::kSynthetic:
      return "synthetic";
    case DataKind::kText:
      return "text";
    case DataKind::kTokens:
      return "tokens";
  }
  return "?";
}

}  // namespace

nlohmann::json memory_peak_json(const MemoryPeaks& peaks) {
  nlohmann::json j = nlohmann::json::object();
  for (int t = 0; t < kNumTiers; ++t) {
    nlohmann::json tier = nlohmann::json::object();
    for (int c = 0; c < kNumCategories; ++c) tier[category_name(static_cast<Category>(c))] = peaks.peak[t][c];
    j[tier_name(static_cast<Tier>(t))] = tier;
  }
  return j;
}

namespace {

// The values "auto" stood for: {"key.path": value, ...} and "key.path value, ...".
nlohmann::json auto_json(const std::vector<std::pair<std::string, nlohmann::json>>& filled) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [path, value] : filled) j[path] = value;
  return j;
}
std::string auto_text(const std::vector<std::pair<std::string, nlohmann::json>>& filled) {
  std::string text = "  \"auto\" filled in as the Hugging Face Trainer does:";
  for (const auto& [path, value] : filled) absl::StrAppend(&text, " ", path, " ", value.dump(), ",");
  text.back() = '\n';
  return text;
}

// The JSON start event: the run's settings, as the text's lines give them.
nlohmann::json start_event(const JobConfig& cfg, int64_t num_params, int world_size, const std::string& device,
                           const ThreadChoice& threads, const std::string& grads_why, double flops_per_token,
                           double peak_flops) {
  const OptimizerConfig& o = cfg.optimizer;
  const GptConfig& m = cfg.model;
  nlohmann::json model_json = gpt_config_json(m);
  model_json["preset"] = cfg.preset;
  nlohmann::json start = {{"event", "start"},
                          {"world_size", world_size},
                          {"device", device},
                          {"threads", threads.threads},
                          {"zero_stage", cfg.zero.stage},
                          {"params", num_params},
                          {"model", model_json},
                          {"data", data_kind_name(cfg.data.kind)},
                          {"seq_len", cfg.data.seq_len},
                          {"train_batch_size", cfg.train_batch_size},
                          {"micro_batch", cfg.micro_batch},
                          {"gradient_accumulation_steps", cfg.grad_accum},
                          {"precision", dtype_name(cfg.precision)},
                          {"optimizer", optimizer_name(o.type)},
                          {"lr", o.lr},
                          {"betas", {o.beta1, o.beta2}},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"scheduler", scheduler_name(cfg.scheduler.type)},
                          {"gradient_clipping", cfg.gradient_clipping},
                          {"activation_checkpointing", cfg.activation_checkpointing},
                          {"micro_batch_grads", micro_batch_grads_name(cfg.zero.micro_batch_grads)},
                          {"accumulation", accumulation_name(cfg.zero.accumulation)},
                          {"steps", cfg.run.steps},
                          {"seed", cfg.run.seed},
                          {"auto", auto_json(cfg.auto_filled)}};
  if (!grads_why.empty()) start["micro_batch_grads_auto"] = grads_why;
  if (!cfg.accumulation_why.empty()) start["accumulation_auto"] = cfg.accumulation_why;
  if (peak_flops > 0) start["mfu"] = {{"flops_per_token", flops_per_token}, {"peak_flops", peak_flops}};
  if (cfg.lora) {
    const LoraConfig& l = cfg.lora->adapters;
    start["lora"] = {{"r", l.r},
                     {"alpha", l.alpha},
                     {"scale", l.scale()},
                     {"target_modules", lora_targets_text(l, m.arch)},
                     {"base_quant", cfg.lora->nf4_base ? "nf4" : "none"},
                     {"frozen_params", gpt_param_count(m)}};
  }
  return start;
}

}  // namespace

// Messages may carry bytes from outside (a path, a file's contents) that
// are not UTF-8: they become U+FFFD, so every line stays JSON.
void RunOutput::line(const nlohmann::json& event) {
  out_ << event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
}

void RunOutput::start(const JobConfig& cfg, int64_t num_params, int world_size, const std::string& device,
                      const ThreadChoice& threads, const std::string& grads_line, const std::string& grads_why,
                      double flops_per_token, double peak_flops) {
  if (format_ == LogFormat::kJson) {
    line(start_event(cfg, num_params, world_size, device, threads, grads_why, flops_per_token, peak_flops));
    return;
  }
  const OptimizerConfig& o = cfg.optimizer;
  const GptConfig& m = cfg.model;
  std::string llama;
  if (m.llama()) {
    llama = absl::StrFormat(", llama: kv heads %d, mlp %d, rope theta %g%s, norm eps %g, head %s%s", m.kv_heads(),
                            m.ffn_hidden, m.rope_theta,
                            m.rope_scaling.factor ? absl::StrFormat(" scaled x%g", m.rope_scaling.factor) : "",
                            m.norm_eps, m.tie_embeddings ? "tied" : "untied", m.qkv_bias ? ", qkv bias" : "");
  }
  out_ << absl::StrFormat("zerod: model %s (n_layer %d, n_head %d, n_embd %d, vocab %d, block %d%s), %d parameters\n",
                          cfg.preset, m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.block_size, llama, num_params);
  out_ << absl::StrFormat("  data %s, seq_len %d | batch %d = micro %d x accumulation %d x world %d | steps %d\n",
                          data_kind_name(cfg.data.kind), cfg.data.seq_len, cfg.train_batch_size, cfg.micro_batch,
                          cfg.grad_accum, world_size, cfg.run.steps);
  out_ << absl::StrFormat(
      "  precision %s | %s lr %g betas (%g, %g) eps %g weight_decay %g | scheduler %s | "
      "clipping %g\n",
      dtype_name(cfg.precision), optimizer_name(o.type), o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
      scheduler_name(cfg.scheduler.type), cfg.gradient_clipping);
  if (cfg.lora) {
    const LoraConfig& l = cfg.lora->adapters;
    out_ << absl::StrFormat("  LoRA r %d alpha %g (scale %g) on %s | %d frozen base parameters%s\n", l.r, l.alpha,
                            l.scale(), lora_targets_text(l, m.arch), gpt_param_count(m),
                            cfg.lora->nf4_base ? " in NF4" : "");
  }
  if (cfg.precision == DType::kF16) {
    out_ << absl::StrFormat("  fp16 loss scale %s | window %d | hysteresis %d | min %g\n",
                            cfg.fp16.loss_scale > 0 ? absl::StrFormat("%g (static)", cfg.fp16.loss_scale)
                                                    : absl::StrFormat("2^%d (dynamic)", cfg.fp16.initial_scale_power),
                            cfg.fp16.loss_scale_window, cfg.fp16.hysteresis, cfg.fp16.min_loss_scale);
  }
  out_ << absl::StrFormat(
      "  device %s (run.device %s) | %d CPU threads (%s) | activation checkpointing %s | zero stage %d | seed %d\n",
      device, cfg.run.device, threads.threads, threads.why, cfg.activation_checkpointing ? "on" : "off", cfg.zero.stage,
      cfg.run.seed);
  if (!grads_line.empty()) out_ << "  " << grads_line << "\n";
  if (const std::string line = accumulation_line(cfg); !line.empty()) out_ << "  " << line << "\n";
  if (!cfg.auto_filled.empty()) out_ << auto_text(cfg.auto_filled);
  out_ << std::flush;
}

void RunOutput::step(const StepResult& r, int64_t total_steps, const StepFigures& f, double elapsed_s) {
  const double tokens_per_s = f.tokens_per_s;
  if (format_ == LogFormat::kJson) {
    nlohmann::json j = {{"event", "step"},
                        {"step", r.step},
                        {"loss", r.loss},
                        {"lr", r.lr},
                        {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                        {"loss_scale", nullptr},
                        {"tokens_per_s", tokens_per_s},
                        {"elapsed_s", elapsed_s}};
    if (r.loss_scale != 1.0 || r.skipped) j["loss_scale"] = r.loss_scale;
    if (r.skipped) j["skipped"] = true;
    if (f.mfu) j["mfu"] = *f.mfu;
    nlohmann::json memory = nlohmann::json::object();
    for (int t = 0; t < kNumTiers; ++t) memory[tier_name(static_cast<Tier>(t))] = f.memory[t];
    j["memory"] = memory;
    line(j);
    return;
  }
  const double eta = r.step > 0 ? elapsed_s / r.step * (total_steps - r.step) : 0;
  std::string scale = r.loss_scale != 1.0 ? absl::StrFormat(" | scale %g", r.loss_scale) : "";
  if (r.skipped) scale += " (overflow, step skipped)";
  out_ << absl::StrFormat(
              "step %*d/%d | loss %.6f | lr %.3e | grad norm %.4f%s | %.0f tok/s | %.1fs elapsed | "
              "ETA %.1fs\n",
              static_cast<int>(std::to_string(total_steps).size()), r.step, total_steps, r.loss, r.lr, r.grad_norm,
              scale, tokens_per_s, elapsed_s, eta)
       << std::flush;
}

void RunOutput::eval(const EvalResult& r, int64_t total_steps, const EvalRecord& record, bool best) {
  if (format_ == LogFormat::kJson) {
    line({{"event", "eval"},
          {"step", r.step},
          {"loss", r.loss},
          {"perplexity", r.perplexity()},
          {"targets", r.targets},
          {"best_loss", record.best_loss},
          {"best_step", record.best_step}});
    return;
  }
  out_ << absl::StrFormat("eval %*d/%d | loss %.6f | perplexity %.4g | %d targets | %s\n",
                          static_cast<int>(std::to_string(total_steps).size()), r.step, total_steps, r.loss,
                          r.perplexity(), r.targets,
                          best ? std::string("best so far")
                               : absl::StrFormat("best %.6f at step %d", record.best_loss, record.best_step))
       << std::flush;
}

void RunOutput::early_stop(int64_t step, int patience, const EvalRecord& record, const std::string& best_checkpoint) {
  if (format_ == LogFormat::kJson) {
    nlohmann::json j = {{"event", "early_stop"},
                        {"step", step},
                        {"patience", patience},
                        {"best_loss", record.best_loss},
                        {"best_step", record.best_step}};
    j["best_checkpoint"] = best_checkpoint.empty() ? nlohmann::json() : nlohmann::json(best_checkpoint);
    line(j);
    return;
  }
  out_ << absl::StrFormat(
              "early stop after step %d: the eval loss has not improved for %d evaluations; best %.6f at "
              "step %d%s\n",
              step, patience, record.best_loss, record.best_step,
              best_checkpoint.empty() ? "" : absl::StrCat(", kept in ", best_checkpoint))
       << std::flush;
}

void RunOutput::summary(const RunSummary& s, const std::vector<MemoryPeaks>& per_rank) {
  const MemoryPeaks& rank0 = per_rank.front();
  if (format_ == LogFormat::kJson) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const MemoryPeaks& p : per_rank) ranks.push_back(memory_peak_json(p));
    nlohmann::json j = {{"event", "summary"},
                        {"steps", s.steps},
                        {"first_loss", s.first_loss},
                        {"final_loss", s.final_loss},
                        {"tokens_per_s", s.tokens_per_s},
                        {"elapsed_s", s.elapsed_s},
                        {"memory_peak", memory_peak_json(rank0)},
                        {"memory_peak_per_rank", ranks},
                        {"memory_planned", memory_peak_json(s.planned)},
                        {"resident_peak", s.resident_peak}};
    if (s.synthetic_accuracy >= 0) j["synthetic_accuracy"] = s.synthetic_accuracy;
    if (s.eval) {
      j["eval_loss"] = s.eval->loss;
      j["eval_perplexity"] = s.eval->perplexity();
      j["best_eval_loss"] = s.eval_record.best_loss;
      j["best_eval_step"] = s.eval_record.best_step;
    }
    if (s.stopped_early) j["stopped_early"] = true;
    for (const SourceTally& t : s.sources)
      j["sources"].push_back({{"path", t.path}, {"weight", t.weight}, {"windows", t.windows}, {"tokens", t.tokens}});
    if (s.time_to_first_step_s >= 0) j["time_to_first_step_s"] = s.time_to_first_step_s;
    if (s.startup) {
      const StartupTimes& t = *s.startup;
      j["startup"] = {{"ready_s", t.ready_s},
                      {"device_s", t.device_s},
                      {"plan_s", t.plan_s},
                      {"build_s", t.build_s},
                      {"init_s", t.init_s},
                      {"resume_s", t.resume_s},
                      {"pinned_bytes", t.pinning.bytes},
                      {"pin_touch_s", t.pinning.touch_s},
                      {"pin_registered_bytes", t.pinning.registered_bytes},
                      {"pin_register_s", t.pinning.register_s},
                      {"pin_wait_s", t.pinning.wait_s}};
      if (t.first_step_pin_wait_s >= 0) j["startup"]["first_step_pin_wait_s"] = t.first_step_pin_wait_s;
    }
    if (!s.sample.empty()) j["sample"] = s.sample;
    if (!s.auto_filled.empty()) j["auto"] = auto_json(s.auto_filled);
    line(j);
    return;
  }
  if (s.steps == 0) {
    out_ << "done: no steps left to train\n";
  } else {
    out_ << absl::StrFormat(
        "done: %d steps in %.1fs | loss %.6f -> %.6f | %.0f tok/s | first step done %.1fs after start", s.steps,
        s.elapsed_s, s.first_loss, s.final_loss, s.tokens_per_s, s.time_to_first_step_s);
    // What of the pinning the start did not hide.
    if (s.startup && s.startup->pinning.bytes > 0 && s.startup->first_step_pin_wait_s >= 0) {
      out_ << absl::StrFormat(" (its copies waited %.1fs for pinned memory's registration)",
                              s.startup->first_step_pin_wait_s);
    }
    out_ << "\n";
  }
  if (s.eval) {
    out_ << absl::StrFormat("eval: loss %.6f (perplexity %.4g) after step %d; best %.6f at step %d%s\n", s.eval->loss,
                            s.eval->perplexity(), s.eval->step, s.eval_record.best_loss, s.eval_record.best_step,
                            s.stopped_early ? ", stopped early" : "");
  }
  uint64_t windows = 0;
  for (const SourceTally& t : s.sources) windows += t.windows;
  if (!s.sources.empty()) out_ << "data.sources since the run began:\n";
  for (const SourceTally& t : s.sources) {
    out_ << absl::StrFormat("  %s (weight %g): %d windows, %d tokens (%.1f%%)\n", t.path, t.weight, t.windows, t.tokens,
                            windows > 0 ? 100.0 * double(t.windows) / double(windows) : 0.0);
  }
  if (s.synthetic_accuracy >= 0) {
    out_ << absl::StrFormat("synthetic accuracy (held-out prompts, greedy): %.1f%%\n", 100 * s.synthetic_accuracy);
  }
  if (!s.sample.empty()) out_ << "sample:\n" << s.sample << (s.sample.back() == '\n' ? "" : "\n");
  if (!s.auto_filled.empty()) out_ << auto_text(s.auto_filled);
  out_ << absl::StrFormat("memory peak (rank 0)  %10s", "");
  for (int c = 0; c < kNumCategories; ++c) out_ << absl::StrFormat(" %11s", category_name(static_cast<Category>(c)));
  out_ << absl::StrFormat(" %11s\n", "total");
  const auto row = [&](const std::string& name, const MemoryPeaks& p, int t) {
    out_ << absl::StrFormat("  %-30s", name);
    for (int c = 0; c < kNumCategories; ++c) out_ << absl::StrFormat(" %11s", byte_size_text(p.peak[t][c]));
    out_ << absl::StrFormat(" %11s\n", byte_size_text(p.total[t]));
  };
  // The plan's row where it differs from what was measured.
  bool as_planned = true;
  for (int t = 0; t < kNumTiers; ++t) {
    const bool same = rank0.peak[t] == s.planned.peak[t] && rank0.total[t] == s.planned.total[t];
    as_planned = as_planned && same;
    if (rank0.total[t] > 0) row(tier_name(static_cast<Tier>(t)), rank0, t);
    if (!same) row(absl::StrCat(tier_name(static_cast<Tier>(t)), ", planned"), s.planned, t);
  }
  if (as_planned) out_ << "  (the memory plan foresaw every tier and category to the byte)\n";
  if (s.resident_peak > 0) {
    out_ << absl::StrFormat("resident peak (VmHWM) %s, of which the accountant's host and pinned peak %s\n",
                            byte_size_text(s.resident_peak), byte_size_text(rank0.host_total()));
  }
  if (per_rank.size() > 1) memory_by_rank(per_rank);
  out_ << std::flush;
}

void RunOutput::breakdown(int64_t steps, bool after_first, const Profiler::Totals& device,
                          const Profiler::Totals& host) {
  if (steps <= 0) return;
  const double n = static_cast<double>(steps);
  const auto step_it = host.find("step");
  const double step_ms = step_it == host.end() ? 0.0 : step_it->second.ms / n;
  // Kernels run on the compute stream, one at a time: their sum is the time
  // it was busy; the rest of the step it waited (on the host, copies, launches).
  double kernels_ms = 0.0, launches = 0.0;
  for (const auto& [name, t] : device) {
    if (name.rfind("copy ", 0) != 0) kernels_ms += t.ms / n;
    launches += static_cast<double>(t.launches) / n;
  }
  const double idle_ms = std::max(0.0, step_ms - kernels_ms);
  auto per_step = [&](const Profiler::Total& t) {
    nlohmann::json j = {{"ms", t.ms / n}, {"count", static_cast<double>(t.count) / n}};
    if (t.bytes) j["bytes"] = static_cast<double>(t.bytes) / n;
    if (t.launches) j["launches"] = static_cast<double>(t.launches) / n;
    return j;
  };
  if (format_ == LogFormat::kJson) {
    nlohmann::json j = {{"event", "breakdown"},
                        {"steps", steps},
                        {"after_first", after_first},
                        {"step_ms", step_ms},
                        {"kernels_ms", kernels_ms},
                        {"idle_ms", idle_ms},
                        {"launches", launches},
                        {"device", nlohmann::json::object()},
                        {"host", nlohmann::json::object()}};
    for (const auto& [name, t] : device) j["device"][name] = per_step(t);
    for (const auto& [name, t] : host) {
      if (name != "step") j["host"][name] = per_step(t);
    }
    line(j);
    return;
  }
  // Slowest first.
  auto sorted = [](const Profiler::Totals& totals) {
    std::vector<std::pair<std::string, Profiler::Total>> v(totals.begin(), totals.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    return v;
  };
  auto row = [&](const std::string& name, const Profiler::Total& t) {
    out_ << absl::StrFormat("  %-48s %10.3f %6.1f%% %8.1f", name, t.ms / n, step_ms > 0 ? 100 * t.ms / n / step_ms : 0,
                            static_cast<double>(t.count) / n);
    if (t.bytes) {
      out_ << absl::StrFormat(" %11s %8.2f GB/s", byte_size_text(t.bytes / steps), t.ms > 0 ? t.bytes / t.ms / 1e6 : 0);
    }
    if (t.launches) out_ << absl::StrFormat(" %8.1f launches", static_cast<double>(t.launches) / n);
    out_ << "\n";
  };
  out_ << absl::StrFormat("where the time went (rank 0, mean of %d steps%s): %.3f ms a step\n", steps,
                          after_first ? " after the first" : "", step_ms);
  out_ << absl::StrFormat("  %-48s %10s %7s %8s\n", "device: kernels and copies", "ms/step", "share", "calls");
  for (const auto& [name, t] : sorted(device)) row(name, t);
  out_ << absl::StrFormat("  %-48s %10.3f %6.1f%%", "kernels, all", kernels_ms,
                          step_ms > 0 ? 100 * kernels_ms / step_ms : 0);
  if (launches > 0) out_ << absl::StrFormat(" %8.1f launches", launches);
  out_ << "\n";
  out_ << absl::StrFormat("  %-48s %10.3f %6.1f%%\n", "compute stream waiting (step less kernels)", idle_ms,
                          step_ms > 0 ? 100 * idle_ms / step_ms : 0);
  for (const auto& [name, t] : sorted(host)) {
    if (name != "step") row("host: " + name, t);
  }
  out_ << std::flush;
}

void RunOutput::memory_by_rank(const std::vector<MemoryPeaks>& per_rank) {
  // One table per tier in use: categories down, ranks and their sum across.
  for (int t = 0; t < kNumTiers; ++t) {
    uint64_t used = 0;
    for (const MemoryPeaks& p : per_rank) used += p.total[t];
    if (used == 0) continue;
    out_ << absl::StrFormat("memory peak by rank, %-10s", tier_name(static_cast<Tier>(t)));
    for (size_t r = 0; r < per_rank.size(); ++r) out_ << absl::StrFormat(" %10s", absl::StrCat("rank ", r));
    out_ << absl::StrFormat(" %10s\n", "sum");
    auto row = [&](const char* name, auto value) {
      uint64_t sum = 0;
      out_ << absl::StrFormat("  %-29s", name);
      for (const MemoryPeaks& p : per_rank) {
        sum += value(p);
        out_ << absl::StrFormat(" %10s", byte_size_text(value(p)));
      }
      out_ << absl::StrFormat(" %10s\n", byte_size_text(sum));
    };
    for (int c = 0; c < kNumCategories; ++c) {
      row(category_name(static_cast<Category>(c)), [&](const MemoryPeaks& p) { return p.peak[t][c]; });
    }
    row("total", [&](const MemoryPeaks& p) { return p.total[t]; });
  }
}

void RunOutput::checkpoint(int64_t step, const std::string& path, uint64_t bytes, double seconds, double blocked_s) {
  if (format_ == LogFormat::kJson) {
    line({{"event", "checkpoint"},
          {"step", step},
          {"path", path},
          {"bytes", bytes},
          {"seconds", seconds},
          {"blocked_s", blocked_s}});
    return;
  }
  out_ << absl::StrFormat("checkpoint after step %d: %s (%s in %.2fs, training paused %.2fs)\n", step, path,
                          byte_size_text(bytes), seconds, blocked_s)
       << std::flush;
}

void RunOutput::resumed(const std::string& path, int64_t step) {
  if (format_ == LogFormat::kJson) {
    line({{"event", "resume"}, {"path", path.empty() ? nlohmann::json() : nlohmann::json(path)}, {"step", step}});
    return;
  }
  if (path.empty()) {
    out_ << "resume: no checkpoint yet; starting from step 0\n" << std::flush;
  } else {
    out_ << absl::StrFormat("resume: from %s after step %d\n", path, step) << std::flush;
  }
}

void RunOutput::ready(const StartupTimes& t) {
  if (format_ == LogFormat::kJson) return;
  out_ << absl::StrFormat("ready %.1fs after start: device %.1fs, plan %.1fs, build %.1fs (initial weights %.1fs",
                          t.ready_s, t.device_s, t.plan_s, t.build_s, t.init_s);
  // Registration goes on behind the start: what is done by now, and what
  // copies had to wait for.
  if (t.pinning.bytes > 0) {
    const std::string registered =
        t.pinning.registered_bytes > 0 ? absl::StrFormat("%s registered so far in %.1fs",
                                                         byte_size_text(t.pinning.registered_bytes), t.pinning.register_s)
                                       : std::string("none registered yet");
    out_ << absl::StrFormat("; %s of host memory pinned: pages touched %.1fs; %s, copies waited %.1fs",
                            byte_size_text(t.pinning.bytes), t.pinning.touch_s, registered, t.pinning.wait_s);
  }
  out_ << ")";
  if (t.resume_s > 0) out_ << absl::StrFormat(", resume %.1fs", t.resume_s);
  out_ << "\n" << std::flush;
}

void RunOutput::error(int rank, const std::string& message) {
  if (format_ == LogFormat::kJson) {
    line({{"event", "error"}, {"rank", rank}, {"message", message}});
  }
  err_ << "zero-worker: error: " << message << "\n" << std::flush;
}

}  // namespace zerod
