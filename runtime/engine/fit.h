// `zeroctl estimate --fit`: the configurations of a job that fit the
// described machines, fastest first. Each is the job's config with some of
// its memory choices changed (ZeRO stage, offload targets, activation
// checkpointing, micro-batch and accumulation at the same global batch, the
// order of the micro-batches, and where allowed bf16 and 8-bit Adam states); its memory is the trainer's
// plan (estimate_memory) and its time a stated cost model (StepCost).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/engine/estimate.h"

namespace zerod {

// The cost model's rates, each per rank unless it says otherwise. Unset
// ones take the defaults fit_rates() documents.
struct FitRates {
  double flops = 0;           // achieved model FLOP/s of a rank's kernels
  double host_bandwidth = 0;  // bytes/s a host optimizer streams through memory
  double pcie = 0;            // bytes/s between a GPU and pinned host memory
  double network = 0;         // bytes/s a rank sends or receives in collectives
  double nvme = 0;            // bytes/s of a node's NVMe, read or write, shared by its ranks
  double dequantize = 0;      // NF4 weights/s a rank dequantizes into its products' operands
};

// `given` with every unset rate filled in for a job of `precision` on
// `machines` (`cpu_threads` a CPU rank's threads): the figures measured in
// bench/RESULTS.md (zerod's gpt2-xl bf16 step on an H200: 246 TFLOP/s, fp32
// at the H100's fp32-to-bf16 peak ratio 67/989; its CPU step 72 GFLOP/s a
// thread; gradients to the host at 21.3 GB/s; NF4 dequantization on the
// CPU, 0.2 G weights/s a thread) and stated assumptions for what has not
// been measured (10 GB/s host optimizer and network, 2 GB/s NVMe; a GPU
// dequantizing NF4 at 70% of an H200's 4.8 TB/s, reading 0.516 bytes and
// writing an operand a weight).
FitRates fit_rates(FitRates given, DType precision, const Machines& machines, int cpu_threads);

// Seconds of one optimizer step on a rank, by what it waits for; nothing
// is taken to overlap, so the total is an upper bound where zerod overlaps
// transfers with compute.
struct StepCost {
  double compute = 0;    // forward, backward and any recompute
  double optimizer = 0;  // an optimizer that runs on the host, over its states
  double pcie = 0;       // gradients down, parameters up (offload)
  double network = 0;    // reduce-scatters, all-reduces and all-gathers between ranks
  double nvme = 0;       // states and parameters read and written on NVMe
  double dequantize = 0;  // a QLoRA base's linear layers, forward and backward of each micro-step
  double total() const { return compute + optimizer + pcie + network + nvme + dequantize; }
};
StepCost step_cost(const JobConfig& cfg, const Machines& machines, const FitRates& rates);

// What the search may change beyond memory placement and batch shape.
struct FitOptions {
  bool allow_bf16 = false;  // fp32 jobs may train in bf16
  bool allow_8bit = false;  // AdamW jobs may keep 8-bit states
  bool allow_nf4 = false;   // LoRA jobs may hold their base in NF4 (QLoRA)
  // The adapter ranks a LoRA job may take (empty: its own), alpha changed
  // with r to keep the adapters' scale; the largest rank that fits is
  // preferred to a faster smaller one.
  std::vector<int> lora_ranks;
  // Where NVMe candidates keep their files when the config names no path;
  // without either, NVMe is not tried.
  std::optional<std::string> nvme_path;
};

struct FitCandidate {
  std::vector<std::string> changes;  // --set assignments from the job to this one
  nlohmann::json config;             // the job's config with them applied
  JobConfig cfg;
  Estimate estimate;
  StepCost cost;
  uint64_t shortfall = 0;  // bytes past the machines' capacities, summed over them (0: fits)
  bool fits() const { return shortfall == 0; }
};

// Every candidate of `root` (a job config, its overrides applied) on
// `machines`, fitting ones first, the largest LoRA rank first, fastest
// first; then those that do not fit, least short first. Candidates the
// config reader refuses are left out; a rank no target allows is refused.
absl::StatusOr<std::vector<FitCandidate>> fit_job(const nlohmann::json& root, const Machines& machines,
                                                  const FitRates& rates, const FitOptions& options);

// The most positions the job's model has: its preset's or its Hugging Face
// config's max_position_embeddings (a sliding window's where it is
// shorter), else its block_size.
int64_t model_positions(const JobConfig& cfg);

// The longest sequence, in steps of 128 from the job's own up to
// `positions` (model_positions, at most 131072), that `c`'s configuration
// fits on `machines` at its micro-batch, model.block_size
// raised with it where it is shorter: what the plan gives at each length
// tried (memory only: the data must still hold such windows). 0 for a
// model of learned positions (GPT-2), which its block_size bounds, or
// where the config's own length does not fit; and, given `beyond` (a
// length found already), where it does not fit 128 more (one plan then,
// not the search).
absl::StatusOr<int64_t> longest_seq_len(const FitCandidate& c, const Machines& machines, int64_t positions,
                                        int64_t beyond = 0);

// The command's --fit report: the `top` fastest that fit (text or one JSON
// object) and the best one's config, also written to `out_path` when given.
// Exit status 0 when one fits, 1 when none does (the closest is named with
// its shortfall), 2 for bad input.
int report_fit(const nlohmann::json& root, const Machines& machines, const FitRates& rates, const FitOptions& options,
               int top, bool json, const std::string& out_path, std::ostream& out, std::ostream& err);

}  // namespace zerod
