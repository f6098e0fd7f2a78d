#include "runtime/telemetry/run_monitor.h"

#include <cctype>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/telemetry/output_files.h"

namespace zerod {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

std::string tag_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  if (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::vector<Scalar> step_scalars(const StepResult& r, const StepFigures& f, bool loss_scaled) {
  const std::string p = "Train/Samples/";
  std::vector<Scalar> s = {{p + "train_loss", r.loss}, {p + "lr", r.lr}};
  if (loss_scaled) s.push_back({p + "loss_scale", r.loss_scale});
  if (std::isfinite(r.grad_norm)) s.push_back({p + "grad_norm", r.grad_norm});
  s.push_back({p + "tokens_per_s", f.tokens_per_s});
  if (f.mfu) s.push_back({p + "mfu", *f.mfu});
  for (int t = 0; t < kNumTiers; ++t) {
    s.push_back(
        {absl::StrCat(p, "memory_", tier_name(static_cast<Tier>(t)), "_bytes"), static_cast<double>(f.memory[t])});
  }
  for (const auto& [name, ms] : f.breakdown_ms) s.push_back({absl::StrCat(p, "elapsed_time_ms_", name), ms});
  return s;
}

absl::Status RunMonitor::prepare(const JobConfig& cfg) {
  for (const auto& [dir, key] :
       {std::pair{tensorboard_log_dir(cfg), "tensorboard"}, {csv_log_dir(cfg), "csv_monitor"}}) {
    if (!dir) continue;
    if (absl::Status s = create_output_dir(*dir); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RunMonitor>> RunMonitor::open(const JobConfig& cfg, int64_t steps_done, bool resumed) {
  const std::optional<std::string> tb = tensorboard_log_dir(cfg), csv = csv_log_dir(cfg);
  if (!tb && !csv) return nullptr;
  std::unique_ptr<RunMonitor> m(new RunMonitor(cfg));
  const std::optional<int64_t> at = resumed ? std::optional(steps_done * cfg.train_batch_size) : std::nullopt;
  if (tb) {
    auto w = EventFileWriter::open(*tb, at, now_s());
    if (!w.ok()) return absl::Status(w.status().code(), absl::StrCat("tensorboard: ", w.status().message()));
    m->events_.emplace(*std::move(w));
  }
  if (csv) {
    auto c = CsvFiles::open(*csv, at);
    if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("csv_monitor: ", c.status().message()));
    m->csv_.emplace(*std::move(c));
  }
  return m;
}

void RunMonitor::failed(const absl::Status& s, const char* what, std::ostream& err) {
  err << "warning: " << what << ": " << s.message() << "; its output ends here, training goes on\n" << std::flush;
}

void RunMonitor::step(const StepResult& r, const StepFigures& f, std::ostream& err) {
  write(r.step * cfg_.train_batch_size, step_scalars(r, f, cfg_.precision == DType::kF16), err);
  if (r.step % cfg_.steps_per_print == 0) flush(err);
}

void RunMonitor::eval(const EvalResult& r, std::ostream& err) {
  const std::string p = "Eval/Samples/";
  write(r.step * cfg_.train_batch_size, {{p + "eval_loss", r.loss}, {p + "eval_perplexity", r.perplexity()}}, err);
  flush(err);
}

void RunMonitor::write(int64_t samples, const std::vector<Scalar>& scalars, std::ostream& err) {
  if (events_) {
    if (absl::Status s = events_->write(samples, now_s(), scalars); !s.ok()) {
      failed(s, "tensorboard", err);
      events_.reset();
    }
  }
  if (csv_) {
    if (absl::Status s = csv_->write(samples, scalars); !s.ok()) {
      failed(s, "csv_monitor", err);
      csv_.reset();
    }
  }
}

void RunMonitor::flush(std::ostream& err) {
  if (events_) {
    if (absl::Status s = events_->flush(); !s.ok()) {
      failed(s, "tensorboard", err);
      events_.reset();
    }
  }
  if (csv_) {
    if (absl::Status s = csv_->flush(); !s.ok()) {
      failed(s, "csv_monitor", err);
      csv_.reset();
    }
  }
}

}  // namespace zerod
