// zero-worker as a library call: parses the command line, runs the job (or
// the export command), reports, and returns the exit status (0 ok, 2 bad
// input, 1 run failure).
#pragma once

#include <optional>
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
  // After each evaluation of the held-out set (data.eval), with the record.
  virtual void evaluated(const EvalResult& eval, const EvalRecord& record) = 0;
  // The run fails with this exit status; called before the abort that ends
  // every rank at once, which leaves no later moment to say so.
  virtual void failing(int exit_code) = 0;
};

// `zero-worker [--config JOB] ...` trains; `zero-worker export --checkpoint
// DIR --out DIR [--dtype fp32|bf16|fp16] [--adapter | --merge [--base FILE]]`
// calls run_export. `env` reaches the trainer (tests inject faults there).
int run_worker(int argc, char** argv, std::ostream& out, std::ostream& err, RunObserver* observer = nullptr,
               TrainerEnv env = {});

struct ExportOptions {
  std::string checkpoint;  // a checkpoint directory, or a root (the checkpoint its `latest` names)
  std::string out_dir;
  std::string dtype = "fp32";
  bool adapter = false;  // a LoRA run's adapters, as PEFT's adapter files
  bool merge = false;    // a LoRA run's model with its adapters folded in
  // The merge's base weights file, instead of the one the manifest names
  // (or the seed it was drawn from).
  std::optional<std::string> base;
};

// Writes the checkpoint's weights to out_dir as Hugging Face GPT-2
// model.safetensors and config.json; with `adapter`, a LoRA run's adapters
// as adapter_model.safetensors and adapter_config.json.
int run_export(const ExportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace zerod
