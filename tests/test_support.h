// Helpers shared by the tests: a small job, a CPU device with its kernels,
// job configs from JSON plus --set style overrides, counting a process's threads and descriptors, and
// reading and comparing files.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/core/cpu_device.h"
#include "runtime/data/token_shard.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/kernels.h"

namespace zerod::testing {

// gpt2-tiny on the synthetic task: 5 steps of 4 sequences of 32 tokens,
// AdamW with clipping. The CPU suite's jobs name run.device cpu: on a GPU
// machine "auto" would take the GPU, which tests/test_cuda_*.cc check
// against the CPU.
inline nlohmann::json tiny_job() {
  return {
      {"model", {{"preset", "gpt2-tiny"}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
      {"run", {{"steps", 5}, {"seed", 7}, {"device", "cpu"}}},
      {"train_micro_batch_size_per_gpu", 4},
      {"gradient_clipping", 1.0},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"weight_decay", 0.1}}}}},
  };
}

// A windowed shard (zeroctl tokenize's) of `examples` instruction examples
// of 8 to `seq_len` ids below 251, each trained from a random point on and
// padded with `pad`, so that windows hold different counts of targets.
inline void write_instruction_shard(const std::string& path, int examples, int seq_len, uint32_t pad) {
  std::mt19937 rng(11);
  std::vector<uint32_t> ids;
  for (int x = 0; x < examples; ++x) {
    const int n = 8 + int(rng() % (seq_len - 7)), from = 1 + int(rng() % (n - 1));
    for (int k = 0; k < seq_len; ++k) {
      const uint32_t id = k < n ? 1 + rng() % 250 : pad;
      ids.push_back(id | (k >= from && k < n ? 0 : kNotTarget));
    }
  }
  ASSERT_TRUE(write_window_shard(path, ids, seq_len).ok());
}

// A packed windowed shard of `windows` windows of `seq_len` ids below 251:
// documents of 2 to seq_len / 2 ids laid in turn (one that does not fit
// starts the next window), each trained from a random point on, and the
// rest of a window EOS (id 0) padding, a document of its own.
inline void write_packed_instruction_shard(const std::string& path, int windows, int seq_len) {
  std::mt19937 rng(12);
  std::vector<uint32_t> ids;
  for (int w = 0; w < windows; ++w) {
    int used = 0;
    for (;;) {
      const int n = 2 + int(rng() % (seq_len / 2 - 1)), from = 1 + int(rng() % (n - 1));
      if (used + n > seq_len) break;
      for (int k = 0; k < n; ++k) {
        const uint32_t id = 1 + rng() % 250;
        ids.push_back(id | (k == 0 ? kDocStart : 0) | (k >= from ? 0 : kNotTarget));
      }
      used += n;
    }
    for (int k = used; k < seq_len; ++k) ids.push_back(kNotTarget | (k == used ? kDocStart : 0));
  }
  ASSERT_TRUE(write_window_shard(path, ids, seq_len, /*packed=*/true).ok());
}

// A Llama small enough for finite differences: 2 layers of 16 in 4 heads
// sharing 2 key heads, an MLP of 24, 32 tokens, 8 positions, its own
// head; or (`qwen`) Qwen2's q/k/v biases and a tied head.
inline GptConfig small_llama(bool qwen = false) {
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_embd = 16;
  c.n_head = 4;
  c.n_kv_head = qwen ? 1 : 2;  // the Qwen-like: every query head over one key and value head
  c.ffn_hidden = 24;
  c.vocab_size = 32;
  c.block_size = 8;
  c.qkv_bias = qwen;
  c.tie_embeddings = qwen;
  return c;
}

// How the in-process tests run the CPU device: synchronously, or with
// ZEROD_TEST_STREAMS=threaded (ctest's `threaded` label) as a GPU would,
// each stream on a thread of its own with random delays and the device's
// memory closed to host code; both must give the same bits.
inline CpuDeviceOptions test_stream_options() {
  const char* mode = std::getenv("ZEROD_TEST_STREAMS");
  CpuDeviceOptions options;
  options.threaded = mode != nullptr && std::string(mode) == "threaded";
  options.device_only_memory = options.threaded;
  return options;
}

// A CPU device and its kernel table, for tests that build models directly.
struct CpuRig {
  CpuDevice device;
  std::unique_ptr<Kernels> kernels;
  explicit CpuRig(CpuDeviceOptions options = test_stream_options())
      : device(MemoryAccountant::global(), options), kernels(*kernels_for(device)) {}
};

// The device the in-process tests train on.
inline Device& test_device() {
  // Lives as long as the process.
  static CpuDevice* device = new CpuDevice(MemoryAccountant::global(), test_stream_options());
  return *device;
}

// A trainer on test_device().
inline absl::StatusOr<std::unique_ptr<Trainer>> make_trainer(const JobConfig& cfg, Communicator* comm = nullptr,
                                                             TrainerEnv env = {}) {
  return Trainer::create(cfg, comm, &test_device(), std::move(env));
}

// `j` with each "key.path=value" applied, parsed for a world of `world_size`.
inline JobConfig config_with(nlohmann::json j, const std::vector<std::string>& overrides, int world_size = 1) {
  for (const std::string& o : overrides) EXPECT_TRUE(apply_override(j, o).ok()) << o;
  auto cfg = parse_job_config(j, world_size);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return cfg.ok() ? *cfg : JobConfig{};
}

// A job trained to its end on `device` (and `comm`, a world of one when
// null): each step's loss and gradient norm and the master weights after;
// the first failure stops it and is kept.
struct TrainedRun {
  std::vector<double> losses, grad_norms;
  std::vector<float> params;
  absl::Status status;
};

inline TrainedRun train_to_end(const JobConfig& cfg, Communicator* comm, Device& device) {
  TrainedRun r;
  auto t = Trainer::create(cfg, comm, &device);
  r.status = t.status();
  for (int64_t i = 0; r.status.ok() && i < cfg.run.steps; ++i) {
    auto s = (*t)->step();
    r.status = s.status();
    if (s.ok()) {
      r.losses.push_back(s->loss);
      r.grad_norms.push_back(s->grad_norm);
    }
  }
  if (!r.status.ok()) return r;
  auto p = (*t)->master_params();
  r.status = p.status();
  if (p.ok()) r.params = std::move(*p);
  return r;
}

// a's overrides, then b's.
inline std::vector<std::string> joined(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The offload tests' job: four layers in bf16, three steps of two
// micro-batches, then `overrides`.
inline JobConfig offload_job(std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"model.n_layer=4", "bf16.enabled=true", "gradient_accumulation_steps=2",
                                       "run.steps=3", "run.seed=11"});
  return config_with(tiny_job(), overrides);
}
// The optimizer's states on `device` (files in `dir`), in sub-groups of
// 20000 elements.
inline std::vector<std::string> optimizer_on(const std::string& device, const std::string& dir) {
  return {"zero_optimization.offload_optimizer.device=\"" + device + "\"",
          "zero_optimization.offload_optimizer.nvme_path=\"" + dir + "\"", "zero_optimization.sub_group_size=20000"};
}
// Stage 3's parameters on `device` (files in `dir`).
inline std::vector<std::string> params_on(const std::string& device, const std::string& dir) {
  return {"zero_optimization.offload_param.device=\"" + device + "\"",
          "zero_optimization.offload_param.nvme_path=\"" + dir + "\""};
}

// Two runs' weights are the same floats, bit for bit (and not empty).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Entries of a /proc/self directory: "/proc/self/fd" (open descriptors) or
// "/proc/self/task" (threads).
inline int count_proc_entries(const char* dir) {
  int n = 0;
  DIR* d = opendir(dir);
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// A file's bytes ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two directories hold files of the same names and bytes (not recursive).
inline void expect_same_files(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(a)) names.push_back(f.path().filename().string());
  EXPECT_EQ(names.size(), static_cast<size_t>(std::distance(fs::directory_iterator(b), {}))) << a << " " << b;
  for (const std::string& n : names) EXPECT_TRUE(read_file(a + "/" + n) == read_file(b + "/" + n)) << n;
}

}  // namespace zerod::testing
