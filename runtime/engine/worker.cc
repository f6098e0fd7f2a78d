#include "runtime/engine/worker.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/bootstrap.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/config/command_line.h"
#include "runtime/config/job_config.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/pinned_host.h"
#include "runtime/model/param_init.h"
#include "runtime/engine/memory_check.h"
#include "runtime/engine/micro_batch_grads.h"
#include "runtime/engine/run_figures.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/telemetry/run_monitor.h"
#include "runtime/telemetry/run_output.h"

namespace zerod {
namespace {

// Every rank's memory peaks, gathered to all (rank 0 prints them).
absl::StatusOr<std::vector<MemoryPeaks>> gather_peaks(Communicator& comm, const MemoryAccountant& acct) {
  static_assert(sizeof(MemoryPeaks) % 8 == 0);
  constexpr int64_t kWords = sizeof(MemoryPeaks) / 8;
  const MemoryPeaks mine = acct.peaks();
  std::vector<MemoryPeaks> all(comm.world_size());
  ZEROD_RETURN_IF_ERROR(comm.all_gather(&mine, all.data(), kWords, CommType::kI64)->wait());
  return all;
}

// The rank's memory plan: its peaks, as the accountant will measure them
// in a run that resumes from `checkpoint` ("": starts afresh).
absl::StatusOr<MemoryPeaks> planned_peaks(const JobConfig& cfg, const RankInfo& rank, const Device& device,
                                          const std::string& checkpoint) {
  MemoryPlan plan(plan_device(device));
  ZEROD_RETURN_IF_ERROR(Trainer::plan(cfg, rank.world_size, rank.rank, kernel_memory_for(device), plan,
                                      Trainer::resume_from(cfg, rank.world_size, checkpoint)));
  return plan.peaks();
}

// The device a rank's "auto" settings plan against: its GPU, or its share
// of one where ranks share it.
PlanDevice rank_share(const RankInfo& rank, const Device& device) {
  PlanDevice here = plan_device(device);
  if (const int gpus = here.memory == Tier::kGpu ? cuda_device_count() : 0; gpus > 0) {
    const int sharing = rank.local_size / gpus + (rank.local_rank % gpus < rank.local_size % gpus ? 1 : 0);
    here.usable_bytes /= std::max(1, sharing);
  }
  return here;
}

// zero_optimization.accumulation as every rank runs it: "auto" decided by
// each rank, then "micro_batch" on all where any rank's plan needs it.
absl::StatusOr<AccumulationChoice> agreed_accumulation(const JobConfig& cfg, const RankInfo& rank, const Device& device,
                                                       Communicator& comm, Trainer::ResumeFrom resume) {
  ZEROD_ASSIGN_OR_RETURN(AccumulationChoice mine, resolve_accumulation(cfg, rank.world_size, kernel_memory_for(device),
                                                                       rank_share(rank, device), resume));
  int64_t micro_batch = mine.mode != Accumulation::kLayer;
  if (comm.world_size() > 1) {
    ZEROD_RETURN_IF_ERROR(all_reduce(comm, &micro_batch, 1, CommType::kI64, ReduceOp::kMax));
  }
  if (!micro_batch || mine.mode != Accumulation::kLayer) return mine;
  return AccumulationChoice{Accumulation::kMicroBatch, "another rank's plan of it does not fit its GPU"};
}

// zero_optimization.micro_batch_grads as every rank runs it: "auto"
// decided by each rank against its GPU (a share of it where ranks share
// one), then "compute" on all where any rank needs it.
absl::StatusOr<MicroBatchGradsChoice> agreed_micro_batch_grads(const JobConfig& cfg, const RankInfo& rank,
                                                               const Device& device, Communicator& comm,
                                                               Trainer::ResumeFrom resume) {
  const PlanDevice here = rank_share(rank, device);
  const KernelMemory kernels = kernel_memory_for(device);
  ZEROD_ASSIGN_OR_RETURN(MicroBatchGradsChoice mine,
                         resolve_micro_batch_grads(cfg, rank.world_size, kernels, here, resume));
  int64_t compute = mine.mode == MicroBatchGrads::kCompute;
  if (comm.world_size() > 1) ZEROD_RETURN_IF_ERROR(all_reduce(comm, &compute, 1, CommType::kI64, ReduceOp::kMax));
  if (!compute || mine.mode == MicroBatchGrads::kCompute) return mine;
  return choose_compute_grads(cfg, rank.world_size, kernels, here, resume,
                              "the step's gradient sum does not fit another rank's GPU");
}

// The checkpoint run.resume names: the one `latest` names in
// run.checkpoint.dir ("" when there is none yet, so a job restarted after a
// failure and one started fresh run the same command), or the path given.
absl::StatusOr<std::string> resume_path(const RunConfig& run) {
  if (*run.resume != "latest") return *run.resume;
  auto latest = latest_checkpoint(*run.checkpoint.dir);
  if (absl::IsNotFound(latest.status())) return std::string();
  return latest;
}

uint64_t directory_bytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) bytes += e.file_size(ec);
  }
  return bytes;
}

// One rank's training once everything is built: the steps, saves at the
// configured interval (published at a step boundary once written), the
// save after the last step, and the summary. Each method returns an exit
// status; a failure goes through `fail`, which ends every rank.
class TrainingRun {
 public:
  using Fail = std::function<int(int code, const std::string& message)>;
  // `planned`: the rank's memory plan, for the summary beside the peaks.
  // `monitor` (rank 0's, or null) writes every step's figures; MFU is taken
  // against `peak_flops` where it is known (positive).
  TrainingRun(const JobConfig& cfg, Trainer& t, RunOutput& output, const MemoryAccountant& acct,
              const MemoryPeaks& planned, Communicator& comm, RunObserver* observer, RunMonitor* monitor,
              double peak_flops, std::ostream& err, Fail fail)
      : cfg_(cfg),
        t_(t),
        output_(output),
        acct_(acct),
        planned_(planned),
        comm_(comm),
        observer_(observer),
        monitor_(monitor),
        peak_flops_(peak_flops),
        flops_per_token_(model_flops_per_token(t)),
        err_(err),
        fail_(std::move(fail)) {}

  // `started`: when the worker began, for the time to its first step;
  // `startup`: where the time went until now.
  int run(std::chrono::steady_clock::time_point started, const StartupTimes& startup) {
    const int64_t first_step = t_.steps_done();
    const double tokens_per_step = static_cast<double>(cfg_.train_batch_size) * cfg_.data.seq_len;
    const auto t0 = Clock::now();
    RunSummary summary;
    summary.auto_filled = cfg_.auto_filled;
    summary.startup = startup;
    const PinningTimes pinned_at_start = pinning_times();
    // A run resumed from the checkpoint of its early stop stops again.
    if (patience_spent()) {
      summary.stopped_early = true;
      summary.eval_record = t_.eval_record();
      output_.early_stop(first_step, cfg_.run.eval.patience, t_.eval_record(), best_checkpoint());
    }
    for (int64_t i = first_step; i < cfg_.run.steps && !summary.stopped_early; ++i) {
      auto r = t_.step();
      if (!r.ok()) return fail_(kExitFailure, absl::StrCat("step ", i + 1, ": ", r.status().message()));
      const auto now = Clock::now();
      if (i == first_step) {
        summary.first_loss = r->loss;
        summary.time_to_first_step_s = std::chrono::duration<double>(now - started).count();
        summary.startup->first_step_pin_wait_s = pinning_times().since(pinned_at_start).wait_s;
      }
      summary.final_loss = r->loss;
      const double elapsed = std::chrono::duration<double>(now - t0).count();
      StepFigures f;
      f.tokens_per_s = tokens_per_step * (r->step - first_step) / (elapsed - eval_s_);
      if (peak_flops_ > 0) f.mfu = flops_per_token_ * f.tokens_per_s / peak_flops_;
      for (int tier = 0; tier < kNumTiers; ++tier) f.memory[tier] = acct_.current_total(static_cast<Tier>(tier));
      if (t_.profiler()) f.breakdown_ms = parts_.take(*t_.profiler());
      // The first step warms up (allocations, the GPU's first launches): its
      // time is left out of the breakdown when others follow.
      if (t_.profiler() && i == first_step && cfg_.run.steps - first_step > 1) {
        t_.profiler()->reset();
        parts_.restart();
      }
      if (r->step % cfg_.steps_per_print == 0 || r->step == cfg_.run.steps) {
        output_.step(*r, cfg_.run.steps, f, elapsed);
      }
      if (monitor_) monitor_->step(*r, f, err_);
      if (observer_) observer_->stepped(*r, cfg_.run.steps, f.tokens_per_s);
      // Every interval and after the last step, before the step's save,
      // which then carries the evaluation's record.
      const int64_t every = cfg_.run.eval.interval;
      if (cfg_.data.eval && ((every > 0 && r->step % every == 0) || r->step == cfg_.run.steps)) {
        if (int code = evaluate(summary); code != kExitOk) return code;
      }
      const int64_t interval = cfg_.run.checkpoint.interval;
      if (cfg_.run.checkpoint.dir && interval > 0 && r->step % interval == 0) {
        if (int code = save(*cfg_.run.checkpoint.dir, cfg_.run.checkpoint.keep); code != kExitOk) return code;
      }
      // A save in the background is published at the first step boundary
      // after every rank's file is written.
      if (int code = finish_save(false); code != kExitOk) return code;
      if (summary.stopped_early) break;
    }
    if (cfg_.run.checkpoint.dir && t_.steps_done() > first_step && saved_step_ != t_.steps_done()) {
      if (int code = save(*cfg_.run.checkpoint.dir, cfg_.run.checkpoint.keep); code != kExitOk) return code;
    }
    if (int code = finish_save(true); code != kExitOk) return code;
    if (monitor_) monitor_->flush(err_);
    if (absl::Status s = t_.finish_pruning(); !s.ok()) return save_failed(s);
    summary.steps = t_.steps_done() - first_step;
    const std::vector<uint64_t> taken = t_.loader_state().taken;
    for (size_t i = 0; i < taken.size(); ++i) {
      const DataSource& source = cfg_.data.sources[i];
      summary.sources.push_back({source.path, source.weight, taken[i], taken[i] * uint64_t(cfg_.data.seq_len)});
    }
    if (const Profiler* p = t_.profiler()) {
      const bool after_first = summary.steps > 1;
      output_.breakdown(summary.steps - (after_first ? 1 : 0), after_first, p->device_totals(), p->host_totals());
    }
    summary.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    // Training's own time: the evaluations' left out.
    const double training_s = summary.elapsed_s - eval_s_;
    summary.tokens_per_s = training_s > 0 ? tokens_per_step * summary.steps / training_s : 0;
    return finish(summary);
  }

 private:
  using Clock = std::chrono::steady_clock;

  int save_failed(const absl::Status& s) {
    return fail_(kExitFailure, absl::StrCat("checkpoint after step ", saving_step_, ": ", s.message()));
  }
  // Reports the save in progress once it is published (with `wait`, waits
  // for it).
  int finish_save(bool wait) {
    if (!t_.checkpoint_pending()) return kExitOk;
    auto saved = t_.finish_checkpoint(wait);
    if (!saved.ok()) return save_failed(saved.status());
    if (*saved) {
      const SavedCheckpoint& c = **saved;
      output_.checkpoint(c.step, c.path, directory_bytes(c.path), c.seconds, c.blocked_s);
    }
    return kExitOk;
  }
  // Saves after the step just trained under `root`, keeping `keep`, once
  // the save before it is done.
  int save(const std::string& root, int keep) {
    if (int code = finish_save(true); code != kExitOk) return code;
    saving_step_ = t_.steps_done();
    if (root == *cfg_.run.checkpoint.dir) saved_step_ = saving_step_;
    absl::Status s = t_.start_checkpoint(root, keep, cfg_.run.checkpoint.async);
    return s.ok() ? kExitOk : save_failed(s);
  }
  // Where run.checkpoint.keep_best keeps the best evaluation's checkpoint:
  // a checkpoint root of its own, of one.
  std::string best_root() const { return *cfg_.run.checkpoint.dir + "/best"; }
  // The best checkpoint's root where keep_best keeps one, else "".
  std::string best_checkpoint() const { return cfg_.run.checkpoint.keep_best ? best_root() : ""; }
  // Whether run.eval.patience evaluations have passed without a lower loss.
  bool patience_spent() const {
    const int patience = cfg_.run.eval.patience;
    return patience > 0 && t_.eval_record().evaluations > 0 && t_.eval_record().since_best >= patience;
  }
  // The held-out set after the step just trained: reported and recorded, a
  // new best saved apart (keep_best); the run marked to stop where
  // run.eval.patience evaluations have passed without a better one.
  int evaluate(RunSummary& summary) {
    const auto start = Clock::now();
    auto r = t_.evaluate();
    if (!r.ok()) {
      return fail_(kExitFailure, absl::StrCat("evaluation after step ", t_.steps_done(), ": ", r.status().message()));
    }
    const bool best = t_.record(*r);
    summary.eval = *r;
    summary.eval_record = t_.eval_record();
    output_.eval(*r, cfg_.run.steps, t_.eval_record(), best);
    if (monitor_) monitor_->eval(*r, err_);
    if (observer_) observer_->evaluated(*r, t_.eval_record());
    eval_s_ += std::chrono::duration<double>(Clock::now() - start).count();
    if (best && cfg_.run.checkpoint.keep_best) {
      if (int code = save(best_root(), 1); code != kExitOk) return code;
    }
    // A run whose last step this was ends anyway: not an early stop.
    if (patience_spent() && r->step < cfg_.run.steps) {
      summary.stopped_early = true;
      output_.early_stop(r->step, cfg_.run.eval.patience, t_.eval_record(), best_checkpoint());
    }
    return kExitOk;
  }
  // The end-of-run evaluation and sample, and every rank's memory peaks.
  int finish(RunSummary& summary) {
    auto accuracy = t_.synthetic_accuracy();
    if (!accuracy.ok()) return fail_(kExitFailure, std::string(accuracy.status().message()));
    summary.synthetic_accuracy = *accuracy;
    auto sample = t_.sample_text();
    if (!sample.ok()) return fail_(kExitFailure, std::string(sample.status().message()));
    summary.sample = *sample;
    summary.planned = planned_;
    summary.resident_peak = resident_peak_bytes();
    auto peaks = gather_peaks(comm_, acct_);
    if (!peaks.ok()) return fail_(kExitFailure, std::string(peaks.status().message()));
    output_.summary(summary, *peaks);
    return kExitOk;
  }

  const JobConfig& cfg_;
  Trainer& t_;
  RunOutput& output_;
  const MemoryAccountant& acct_;
  const MemoryPeaks planned_;
  Communicator& comm_;
  RunObserver* observer_;
  RunMonitor* monitor_;
  const double peak_flops_, flops_per_token_;
  std::ostream& err_;
  StepParts parts_;
  const Fail fail_;
  int64_t saved_step_ = -1;   // of the newest save started under run.checkpoint.dir
  int64_t saving_step_ = -1;  // of the newest save started anywhere (best/ too)
  double eval_s_ = 0;         // the evaluations' seconds, left out of tokens/s
};

}  // namespace

int run_worker(int argc, char** argv, std::ostream& out, std::ostream& err, RunObserver* observer, TrainerEnv env) {
  const auto started = std::chrono::steady_clock::now();
  CLI::App app{"zero-worker: trains one zerod job"};
  std::string config_path, log_format;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "job config (JSON); required unless a subcommand is given");
  app.add_option("--set", overrides, "override a config key: key.path=value (JSON value)");
  app.add_option("--log-format", log_format, "run output: text or json")->check(CLI::IsMember({"text", "json"}));
  app.require_subcommand(0, 1);
  ExportOptions ex;
  CLI::App* exp = app.add_subcommand(
      "export",
      "write a checkpoint's weights as Hugging Face files: model.safetensors (a Llama's in shards past "
      "5 GiB, with model.safetensors.index.json) and config.json");
  exp->add_option("--checkpoint", ex.checkpoint, "checkpoint directory, or a checkpoint root (its latest)")->required();
  exp->add_option("--out", ex.out_dir, "output directory")->required();
  exp->add_option("--dtype", ex.dtype, "weights' type: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  CLI::Option* adapter =
      exp->add_flag("--adapter", ex.adapter, "a LoRA run's adapters as PEFT's adapter_model.safetensors");
  exp->add_flag("--merge", ex.merge, "a LoRA run's model with its adapters folded in")->excludes(adapter);
  exp->add_option("--base", ex.base, "--merge: the base weights file, instead of the one the checkpoint names");
  if (auto code = parse_command_line(app, "zero-worker", out, err, [&] {
        app.parse(argc, argv);
        if (!exp->parsed() && config_path.empty()) throw CLI::RequiredError("--config");
      })) {
    return *code;
  }
  if (exp->parsed()) return run_export(ex, out, err);
  if (!log_format.empty()) overrides.push_back("run.log_format=\"" + log_format + "\"");

  // Until the config is read, errors go out in the requested format or text.
  // Until training starts, each error's kind gives the exit status
  // (exit_codes.h); once it has, every error is the run's.
  RunOutput early(log_format == "json" ? LogFormat::kJson : LogFormat::kText, out, err);
  auto rank = discover_rank();
  if (!rank.ok()) {
    early.error(0, std::string(rank.status().message()));
    return exit_code_for(rank.status());
  }
  auto cfg = load_job_config(config_path, overrides, rank->world_size);
  if (!cfg.ok()) {
    early.error(rank->rank, std::string(cfg.status().message()));
    return exit_code_for(cfg.status());
  }
  // Before any kernel runs: the CPU threads this rank uses.
  const ThreadChoice threads = choose_threads(cfg->run.threads, rank->local_size);
  use_threads(threads.threads);
  // Rank 0 speaks for the job; every rank reports its own errors.
  std::ostringstream quiet;
  RunOutput output(cfg->run.log_format, rank->rank == 0 ? out : quiet, err);
  // A device this machine or build does not have is refused before anything runs.
  auto device = open_device(cfg->run.device, rank->local_rank);
  if (!device.ok()) {
    output.error(rank->rank, std::string(device.status().message()));
    return exit_code_for(device.status());
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg->run.collective_timeout_s * 1000));
  // Over MPI between ranks, and on GPUs NCCL or MPI through staging.
  auto comm = make_communicator(*rank, timeout);
  if (comm.ok()) comm = make_device_communicator(*std::move(comm), *rank, **device, timeout);
  if (!comm.ok()) {
    output.error(rank->rank, std::string(comm.status().message()));
    return exit_code_for(comm.status());
  }
  StartupTimes startup;
  auto lap = [last = started]() mutable {
    const auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(now - std::exchange(last, now)).count();
  };
  startup.device_s = lap();
  // Past this point the ranks are in lockstep: one rank failing alone ends
  // the whole job rather than leaving its peers waiting in a collective.
  auto fail = [&](int code, const std::string& message) {
    output.error(rank->rank, message);
    if (observer) observer->failing(code);
    if ((*comm)->world_size() > 1) (*comm)->abort(code);
    return code;
  };
  MemoryAccountant& acct = (*device)->accountant();
  acct.set_limit(Tier::kHost, cfg->run.host_memory_limit.value_or(0));
  acct.set_limit(Tier::kGpu, cfg->run.gpu_memory_limit.value_or(0));
  acct.reset_peaks();
  const auto refuse = [&](const absl::Status& s, const char* context = "") {
    return fail(exit_code_for(s), absl::StrCat(context, s.message()));
  };
  // The checkpoint a resume reads, "" when there is none yet.
  std::string resume_from;
  if (cfg->run.resume) {
    auto path = resume_path(cfg->run);
    if (!path.ok()) return refuse(path.status());
    resume_from = *std::move(path);
  }
  // Decided once, for the plan and the build alike.
  const auto order =
      agreed_accumulation(*cfg, *rank, **device, **comm, Trainer::resume_from(*cfg, rank->world_size, resume_from));
  if (!order.ok()) return refuse(order.status());
  order->apply(*cfg);
  const auto grads = agreed_micro_batch_grads(*cfg, *rank, **device, **comm,
                                              Trainer::resume_from(*cfg, rank->world_size, resume_from));
  if (!grads.ok()) return refuse(grads.status());
  grads->apply(cfg->zero);
  const absl::StatusOr<MemoryPeaks> planned = planned_peaks(*cfg, *rank, **device, resume_from);
  if (!planned.ok()) return refuse(planned.status());
  const NodeMemory node = node_memory();
  if (absl::Status s = check_memory_plan(*cfg, rank->rank, rank->local_size, *planned, node); !s.ok()) {
    const auto root = load_job_json(config_path, overrides);
    const std::string advice =
        root.ok() ? fit_advice(*root, *cfg, rank->world_size, plan_device(**device).memory == Tier::kGpu,
                               host_memory_per_rank(*cfg, rank->local_size, node))
                  : "";
    return refuse(advice.empty() ? s : absl::Status(s.code(), absl::StrCat(s.message(), "; ", advice)));
  }
  // A checkpoint directory that cannot be written is found now, not at the first save.
  if (cfg->run.checkpoint.dir) {
    if (absl::Status s = check_checkpoint_root(*cfg->run.checkpoint.dir); !s.ok()) {
      return refuse(s, "run.checkpoint.dir: ");
    }
  }
  // So are the monitors' directories, which rank 0 writes.
  if (rank->rank == 0) {
    if (absl::Status s = RunMonitor::prepare(*cfg); !s.ok()) return refuse(s);
  }

  startup.plan_s = lap();
  const PinningTimes pinned_before = pinning_times();
  const double init_before = initial_weights_seconds();
  auto trainer = Trainer::create(*cfg, comm->get(), device->get(), std::move(env));
  if (!trainer.ok()) {
    // Running out of memory while building is a run failure, whose message
    // names what set the size.
    if (!absl::IsResourceExhausted(trainer.status())) return refuse(trainer.status());
    return fail(kExitFailure, absl::StrCat(trainer.status().message(), "; ", what_sets_the_size(*cfg)));
  }
  Trainer& t = **trainer;
  // A CPU's peak is measured, so only for a run that writes its MFU
  // somewhere beside the step events (rank 0's monitor).
  const bool monitored = tensorboard_log_dir(*cfg) || csv_log_dir(*cfg);
  const double peak_flops = rank->rank == 0 && (monitored || is_cuda_device(**device)) ? run_peak_flops(**device) : 0;
  startup.build_s = lap();
  startup.init_s = initial_weights_seconds() - init_before;
  output.start(*cfg, t.num_params(), rank->world_size, (*device)->description(), threads, grads->line(), grads->why,
               model_flops_per_token(t), peak_flops);
  if (cfg->run.resume) {
    if (!resume_from.empty()) {
      if (absl::Status s = t.resume(resume_from); !s.ok()) return refuse(s);
    }
    startup.resume_s = lap();
    output.resumed(resume_from, t.steps_done());
  }
  // Rank 0 writes the figures, from where a resumed run goes on.
  std::unique_ptr<RunMonitor> monitor;
  if (rank->rank == 0) {
    auto m = RunMonitor::open(*cfg, t.steps_done(), !resume_from.empty());
    if (!m.ok()) return refuse(m.status());
    monitor = *std::move(m);
  }
  startup.pinning = pinning_times().since(pinned_before);
  startup.ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  output.ready(startup);
  return TrainingRun(*cfg, t, output, acct, *planned, **comm, observer, monitor.get(), peak_flops, err, fail)
      .run(started, startup);
}

}  // namespace zerod
