// The run output of CONFIG.md: text for people, one JSON object per line for
// programs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"
#include "runtime/core/pinned_host.h"
#include "runtime/core/profiler.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/telemetry/step_result.h"

namespace zerod {

// What a source of data.sources gave since the run began (a resumed run
// counts from its first start): its windows, all ranks', and their tokens.
struct SourceTally {
  std::string path;
  double weight = 0;
  uint64_t windows = 0, tokens = 0;
};

// Where a worker's time went before its first step, in seconds.
struct StartupTimes {
  double ready_s = 0;    // from the worker's start to its first step's start
  double device_s = 0;   // the config read, the device and the communicator opened
  double plan_s = 0;     // the memory plan and the checks before building
  double build_s = 0;    // the trainer (model, stores, initial weights, optimizer), its peak FLOP/s
  double init_s = 0;     // of build_s: the initial weights drawn or read (initial_weights_seconds)
  double resume_s = 0;   // the banner printed, the checkpoint resumed from read
  PinningTimes pinning;  // host memory pinned in the build and the resume (pinning_times)
  // What the first step's copies waited for registrations not done by its
  // start: the part of pinning the start did not hide (-1: no step yet).
  double first_step_pin_wait_s = -1;
};

struct RunSummary {
  int64_t steps = 0;
  double first_loss = 0, final_loss = 0;
  double tokens_per_s = 0, elapsed_s = 0;
  double synthetic_accuracy = -1;  // absent when negative
  // data.eval's: the last evaluation and the record (absent without one),
  // and whether run.eval.patience stopped the run.
  std::optional<EvalResult> eval;
  EvalRecord eval_record;
  bool stopped_early = false;
  std::vector<SourceTally> sources;  // data.sources', in order
  // From the worker's start to the end of its first step (the build, the
  // initial weights, the step): absent when negative (no step trained).
  double time_to_first_step_s = -1;
  std::optional<StartupTimes> startup;
  std::string sample;
  std::vector<std::pair<std::string, nlohmann::json>> auto_filled;  // JobConfig's
  MemoryPeaks planned;                                              // rank 0's memory plan
  uint64_t resident_peak = 0;                                       // rank 0's peak resident memory (0: unknown)
};

// Peak bytes by tier and category: {"host": {"params": .., ...}, "pinned": ..}.
nlohmann::json memory_peak_json(const MemoryPeaks& peaks);

class RunOutput {
 public:
  RunOutput(LogFormat format, std::ostream& out, std::ostream& err) : format_(format), out_(out), err_(err) {}

  // `device`: what each rank trains on (Device::description); `threads`:
  // its CPU threads and why that many; `grads_line` and `grads_why`: how
  // zero_optimization.micro_batch_grads (resolved) moves the micro-batches
  // and, for "auto", why (MicroBatchGradsChoice).
  // `flops_per_token` and `peak_flops`: what the steps' MFU is (JSON's
  // "mfu" object, where the peak is known).
  void start(const JobConfig& cfg, int64_t num_params, int world_size, const std::string& device,
             const ThreadChoice& threads, const std::string& grads_line = "", const std::string& grads_why = "",
             double flops_per_token = 0, double peak_flops = 0);
  // JSON's step event carries the figures' MFU (where known) and memory by tier too.
  void step(const StepResult& r, int64_t total_steps, const StepFigures& f, double elapsed_s);
  // `per_rank` holds every rank's memory peaks, rank 0 first.
  void summary(const RunSummary& s, const std::vector<MemoryPeaks>& per_rank);
  // wall_clock_breakdown: rank 0's totals over `steps` steps (those after
  // the first, a warm-up, when `after_first`), per step; host "step" is
  // their wall time, device names are kernels and copies.
  void breakdown(int64_t steps, bool after_first, const Profiler::Totals& device, const Profiler::Totals& host);
  // An evaluation of the held-out set, and the record with it (`best`: it
  // is the lowest so far).
  void eval(const EvalResult& r, int64_t total_steps, const EvalRecord& record, bool best);
  // run.eval.patience ends the run after `step`: the best evaluation, and
  // the checkpoint kept of it (run.checkpoint.keep_best; "" when none).
  void early_stop(int64_t step, int patience, const EvalRecord& record, const std::string& best_checkpoint);
  // A checkpoint saved after `step`: its directory, total bytes, the
  // seconds from the start of the save to its publication, and those of
  // them that training waited (less when written in the background).
  void checkpoint(int64_t step, const std::string& path, uint64_t bytes, double seconds, double blocked_s);
  // Training goes on from `path` after its `step` (or from the start when
  // path is empty: "latest" found no checkpoint).
  void resumed(const std::string& path, int64_t step);
  // Text only, before the first step: where the start's seconds went (JSON
  // has them in the summary's "startup").
  void ready(const StartupTimes& t);
  void error(int rank, const std::string& message);

 private:
  void line(const nlohmann::json& event);
  void memory_by_rank(const std::vector<MemoryPeaks>& per_rank);

  LogFormat format_;
  std::ostream& out_;
  std::ostream& err_;
};

}  // namespace zerod
