// Training tokens/s of the real trainer under each ZeRO stage, with
// overlap_comm on and off, and the time forward/backward spent blocked on
// collectives. Run once per world size:
//
//   mpirun -np 4 --oversubscribe -x OMP_NUM_THREADS=1 build/bench/zero_throughput [preset] [steps]
//
// Stage 0 at the same world size, measured in the same run, is the
// reference for the ratio column.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/bootstrap.h"
#include "runtime/engine/trainer.h"

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "gpt2";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 3;
  auto rank = zerod::discover_rank();
  auto comm = rank.ok() ? zerod::make_communicator(*rank, std::chrono::minutes(10)) : rank.status();
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 1;
  }
  zerod::Communicator& c = **comm;
  const int n = c.world_size();
  if (c.rank() == 0) {
    std::printf("preset %s, ranks %d, micro-batch 1 x seq 64 per rank, %d timed steps after 1 warm-up\n",
                preset.c_str(), n, steps);
    std::printf("%-6s %-8s %12s %14s %16s %8s\n", "stage", "overlap", "tokens/s", "step s", "blocked s/step",
                "ratio");
  }
  double reference = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      if (stage < 2 && !overlap) continue;  // stages 0 and 1 communicate after backward only
      nlohmann::json j = {
          {"model", {{"preset", preset}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 64}}},
          {"run", {{"steps", steps + 1}}},
          {"train_batch_size", n},
          {"gradient_accumulation_steps", 1},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}}}}},
          {"zero_optimization", {{"stage", stage}, {"overlap_comm", overlap}, {"reduce_bucket_size", 50000000}}}};
      auto cfg = zerod::parse_job_config(j, n);
      auto t = cfg.ok() ? zerod::Trainer::create(*cfg, &c) : cfg.status();
      if (!t.ok()) {
        std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
        return 1;
      }
      if (!(*t)->step().ok()) return 1;
      const double wait0 = (*t)->zero().pass_comm_wait_s();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) {
        if (!(*t)->step().ok()) return 1;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      const double blocked = ((*t)->zero().pass_comm_wait_s() - wait0) / steps;
      const double tok_s = 64.0 * n / s;
      if (stage == 0) reference = tok_s;
      if (c.rank() == 0) {
        std::printf("%-6d %-8s %12.1f %14.3f %16.3f %8.3f\n", stage, overlap ? "on" : "off", tok_s, s, blocked,
                    tok_s / reference);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
