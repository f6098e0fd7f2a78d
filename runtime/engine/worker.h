// zero-worker as a library call: parses the command line, runs the job (or
// the export command), reports, and returns the exit status (0 ok, 2 bad
// input, 1 run failure).
#pragma once

#include <ostream>
#include <string>

#include "runtime/core/exit_codes.h"
#include "runtime/engine/trainer.h"

namespace zerod {

// What a supervisor (zerod) learns of a training run as it goes; called on
// the training thread.
class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // After each optimizer step, with the run's total steps and throughput.
  virtual void stepped(const StepResult& step, int64_t total_steps, double tokens_per_s) = 0;
  // The run fails with this exit status; called before the abort that ends
  // every rank at once, which leaves no later moment to say so.
  virtual void failing(int exit_code) = 0;
};

// `zero-worker [--config JOB] ...` trains; `zero-worker export --checkpoint
// DIR --out DIR [--dtype fp32|bf16|fp16]` calls run_export. `env` reaches
// the trainer (tests inject faults there).
int run_worker(int argc, char** argv, std::ostream& out, std::ostream& err, RunObserver* observer = nullptr,
               TrainerEnv env = {});

// Writes the checkpoint's weights (a checkpoint directory, or a checkpoint
// root for the one `latest` names) to out_dir as Hugging Face GPT-2
// model.safetensors and config.json.
int run_export(const std::string& checkpoint, const std::string& out_dir, const std::string& dtype,
               std::ostream& out, std::ostream& err);

}  // namespace zerod
