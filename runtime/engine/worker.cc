#include "runtime/engine/worker.h"

#include <chrono>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/config/job_config.h"
#include "runtime/core/device.h"
#include "runtime/engine/rank_env.h"
#include "runtime/engine/trainer.h"
#include "runtime/telemetry/run_output.h"

namespace zerod {
namespace {

// Settings that this build cannot honour yet are refused before anything runs.
absl::Status check_supported(const JobConfig& cfg, const RankInfo& rank) {
  if (rank.world_size > 1) {
    return absl::UnimplementedError(absl::StrCat("launched as rank ", rank.rank, " of ", rank.world_size,
                                                 ", but this build trains in a single process only"));
  }
  if (cfg.run.device == "cuda") {
    return absl::UnimplementedError(absl::StrCat("run.device 'cuda': this build trains on the CPU only (",
                                                 cuda_device_count(), " CUDA devices visible)"));
  }
  return absl::OkStatus();
}

}  // namespace

int run_worker(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"zero-worker: trains one zerod job"};
  std::string config_path, log_format;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "job config (JSON)")->required();
  app.add_option("--set", overrides, "override a config key: key.path=value (JSON value)");
  app.add_option("--log-format", log_format, "run output: text or json")->check(CLI::IsMember({"text", "json"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err << "zero-worker: error: " << e.what() << "\n" << app.help();
    return kExitBadInput;
  }
  if (!log_format.empty()) overrides.push_back("run.log_format=\"" + log_format + "\"");

  // Until the config is read, errors go out in the requested format or text.
  RunOutput early(log_format == "json" ? LogFormat::kJson : LogFormat::kText, out, err);
  auto rank = discover_rank();
  if (!rank.ok()) {
    early.error(0, std::string(rank.status().message()));
    return kExitBadInput;
  }
  auto cfg = load_job_config(config_path, overrides, rank->world_size);
  if (!cfg.ok()) {
    early.error(rank->rank, std::string(cfg.status().message()));
    return kExitBadInput;
  }
  RunOutput output(cfg->run.log_format, out, err);
  if (absl::Status s = check_supported(*cfg, *rank); !s.ok()) {
    output.error(rank->rank, std::string(s.message()));
    return kExitBadInput;
  }
  MemoryAccountant& acct = MemoryAccountant::global();
  acct.set_limit(Tier::kHost, cfg->run.host_memory_limit.value_or(0));
  acct.set_limit(Tier::kGpu, cfg->run.gpu_memory_limit.value_or(0));
  acct.reset_peaks();

  auto trainer = Trainer::create(*cfg);
  if (!trainer.ok()) {
    output.error(rank->rank, std::string(trainer.status().message()));
    // Running out of memory while building is a run failure, not bad input.
    return absl::IsResourceExhausted(trainer.status()) ? kExitFailure : kExitBadInput;
  }
  Trainer& t = **trainer;
  output.start(*cfg, t.num_params(), rank->world_size);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const double tokens_per_step = static_cast<double>(cfg->train_batch_size) * cfg->data.seq_len;
  RunSummary summary;
  for (int64_t i = 0; i < cfg->run.steps; ++i) {
    auto r = t.step();
    if (!r.ok()) {
      output.error(rank->rank, absl::StrCat("step ", i + 1, ": ", r.status().message()));
      return kExitFailure;
    }
    if (i == 0) summary.first_loss = r->loss;
    summary.final_loss = r->loss;
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r->step % cfg->steps_per_print == 0 || r->step == cfg->run.steps) {
      output.step(*r, cfg->run.steps, tokens_per_step * r->step / elapsed, elapsed);
    }
  }
  summary.steps = cfg->run.steps;
  summary.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  summary.tokens_per_s = tokens_per_step * cfg->run.steps / summary.elapsed_s;
  summary.synthetic_accuracy = t.synthetic_accuracy();
  summary.sample = t.sample_text();
  output.summary(summary, acct);
  return kExitOk;
}

}  // namespace zerod
