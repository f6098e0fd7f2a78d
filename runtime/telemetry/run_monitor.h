// Every step's figures as TensorBoard event files and CSV files (DeepSpeed's
// tensorboard and csv_monitor sections, run.tensorboard_dir), written by
// rank 0. The x-axis is DeepSpeed's: samples trained (steps x
// train_batch_size); the tags are "Train/Samples/<figure>", DeepSpeed's
// own names where it writes the figure too (train_loss, lr, loss_scale),
// and the held-out set's "Eval/Samples/eval_loss" and "eval_perplexity".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/core/memory.h"
#include "runtime/telemetry/csv_files.h"
#include "runtime/telemetry/event_file.h"
#include "runtime/telemetry/step_result.h"

namespace zerod {

// The scalars of a step, tagged; loss_scale only where fp16 scales the loss.
std::vector<Scalar> step_scalars(const StepResult& r, const StepFigures& f, bool loss_scaled);

// A name as a tag's last part: lower case, runs of anything but letters
// and digits as one '_' ("copy host->device" is copy_host_device).
std::string tag_name(const std::string& name);

class RunMonitor {
 public:
  // Creates the directories the config names, so that a path that cannot
  // be created is refused before anything is built.
  static absl::Status prepare(const JobConfig& cfg);
  // None when nothing is to be written. `steps_done`: where a resumed run
  // goes on from (what was written past it is cut); 0 for a fresh run.
  static absl::StatusOr<std::unique_ptr<RunMonitor>> open(const JobConfig& cfg, int64_t steps_done, bool resumed);

  // After each step; what is written reaches the files every
  // steps_per_print steps and at the run's end (flush). A write that fails
  // is said once on `err` and ends that output: training goes on.
  void step(const StepResult& r, const StepFigures& f, std::ostream& err);
  // An evaluation of the held-out set: "Eval/Samples/eval_loss" and
  // "eval_perplexity" at its step's samples, written through.
  void eval(const EvalResult& r, std::ostream& err);
  void flush(std::ostream& err);

 private:
  explicit RunMonitor(const JobConfig& cfg) : cfg_(cfg) {}
  void write(int64_t samples, const std::vector<Scalar>& scalars, std::ostream& err);
  void failed(const absl::Status& s, const char* what, std::ostream& err);

  const JobConfig& cfg_;
  std::optional<EventFileWriter> events_;
  std::optional<CsvFiles> csv_;
};

}  // namespace zerod
