// LoRA against full fine-tuning on the CPU: the same model, batch and
// optimizer (fp32 AdamW, stage 0), trained in full, with LoRA (r 8 on
// c_attn, PEFT's default) beside a frozen fp32 base, and with that base in
// NF4. For each: seconds a step (the median of the timed steps, after one
// warm-up step) and the peak bytes of each memory category, from the run's
// own accountant.
//
//   build/bench/lora_vs_full [steps]      (default 3)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/core/cpu_device.h"
#include "runtime/engine/trainer.h"

namespace {

struct Way {
  const char* name;
  const char* lora;  // model.lora, or null for full fine-tuning
};

double mib(uint64_t bytes) { return double(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  const Way ways[] = {{"full", nullptr},
                      {"LoRA", R"({"r": 8})"},
                      {"QLoRA", R"({"r": 8, "base_quant": "nf4"})"}};
  std::printf("%-12s %-6s %12s %9s %9s %9s %9s %9s %11s %9s %9s\n", "model", "way", "trained", "s/step", "params",
              "frozen", "grads", "optimizer", "activations", "workspace", "total MiB");
  for (const char* preset : {"gpt2", "gpt2-medium"}) {
    for (const Way& w : ways) {
      nlohmann::json j = {{"model", {{"preset", preset}}},
                          {"data", {{"kind", "synthetic"}, {"seq_len", 128}}},
                          {"run", {{"steps", steps + 1}, {"device", "cpu"}}},
                          {"train_micro_batch_size_per_gpu", 1},
                          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}, {"weight_decay", 0.0}}}}}};
      if (w.lora) j["model"]["lora"] = nlohmann::json::parse(w.lora);
      const zerod::JobConfig cfg = zerod::bench::checked(zerod::parse_job_config(j, 1));
      zerod::MemoryAccountant accountant;
      zerod::CpuDevice device(accountant);
      const auto trainer = zerod::bench::checked(zerod::Trainer::create(cfg, nullptr, &device));
      zerod::bench::check(trainer->step().status());  // warm-up
      std::vector<double> seconds;
      for (int i = 0; i < steps; ++i) {
        seconds.push_back(zerod::bench::seconds([&] { zerod::bench::check(trainer->step().status()); }));
      }
      std::sort(seconds.begin(), seconds.end());
      const zerod::MemoryPeaks p = accountant.peaks();
      const auto host = [&](zerod::Category c) {
        return mib(p.peak[static_cast<int>(zerod::Tier::kHost)][static_cast<int>(c)]);
      };
      using zerod::Category;
      std::printf("%-12s %-6s %12lld %9.2f %9.1f %9.1f %9.1f %9.1f %11.1f %9.1f %9.1f\n", preset, w.name,
                  static_cast<long long>(trainer->num_params()), seconds[seconds.size() / 2],
                  host(Category::kParams), host(Category::kFrozen), host(Category::kGrads), host(Category::kOptimizer),
                  host(Category::kActivations), host(Category::kWorkspace),
                  mib(p.total[static_cast<int>(zerod::Tier::kHost)]));
    }
  }
  return 0;
}
