// CPU training throughput against the machine's own sgemm speed.
//
// For each model: tokens/s over timed optimizer steps (after one warm-up
// step), model FLOPs per token (6N for the parameters' matmuls plus
// 12 * n_layer * T * n_embd for attention scores and values, forward and
// backward, full T x T as computed), achieved GFLOP/s, and the ratio to a
// large sgemm measured in the same run.
//
//   build/bench/train_throughput [steps]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/engine/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best of several runs of C[M,N] = A[M,K] B[K,N], in GFLOP/s.
double sgemm_gflops(int M, int N, int K) {
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), c(size_t(M) * N);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    best = std::max(best, 2.0 * M * N * K / seconds_since(t0) / 1e9);
  }
  return best;
}

struct Case {
  const char* name;
  const char* preset;
  int micro_batch, seq_len;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  const double peak = sgemm_gflops(1024, 3072, 768);
  std::printf("sgemm 1024x3072x768: %.1f GFLOP/s (best of 5)\n\n", peak);
  std::printf("%-10s %6s %6s %12s %14s %10s %12s\n", "model", "batch", "seq", "params", "MFLOP/token", "tok/s",
              "GFLOP/s (%)");
  const Case cases[] = {{"gpt2-tiny", "gpt2-tiny", 16, 64}, {"gpt2", "gpt2", 4, 256}};
  for (const Case& c : cases) {
    nlohmann::json j = {{"model", {{"preset", c.preset}}},
                        {"data", {{"kind", "synthetic"}, {"seq_len", c.seq_len}}},
                        {"run", {{"steps", steps + 1}}},
                        {"train_micro_batch_size_per_gpu", c.micro_batch},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-4}, {"weight_decay", 0.1}}}}}};
    auto cfg = zerod::parse_job_config(j, 1);
    if (!cfg.ok()) {
      std::fprintf(stderr, "%s\n", std::string(cfg.status().message()).c_str());
      return 1;
    }
    auto trainer = zerod::Trainer::create(*cfg);
    if (!trainer.ok()) {
      std::fprintf(stderr, "%s\n", std::string(trainer.status().message()).c_str());
      return 1;
    }
    if (!(*trainer)->step().ok()) return 1;  // warm-up
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) {
      if (!(*trainer)->step().ok()) return 1;
    }
    const double tok_s = double(steps) * c.micro_batch * c.seq_len / seconds_since(t0);
    const zerod::GptConfig& m = cfg->model;
    const double flops_per_token =
        6.0 * (*trainer)->num_params() + 12.0 * m.n_layer * double(c.seq_len) * m.n_embd;
    const double gflops = flops_per_token * tok_s / 1e9;
    std::printf("%-10s %6d %6d %12lld %14.1f %10.0f %6.1f (%.0f%%)\n", c.name, c.micro_batch, c.seq_len,
                static_cast<long long>((*trainer)->num_params()), flops_per_token / 1e6, tok_s, gflops,
                100 * gflops / peak);
  }
  return 0;
}
