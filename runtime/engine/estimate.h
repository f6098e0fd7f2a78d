// `zeroctl estimate`: what a job will hold in memory, per rank and per
// node, in each tier and category, before anything runs: the trainer's
// memory plan (Trainer::plan) for every rank of the described machines,
// checked against their capacities.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/config/job_config.h"
#include "runtime/core/memory_plan.h"

namespace zerod {

// The machines a job is estimated for.
struct Machines {
  int ranks = 1;
  int nodes = 1;
  bool gpu = false;  // ranks train on GPUs (else CPUs)
  // Capacities; absent: not checked.
  std::optional<uint64_t> gpu_memory;   // per GPU
  std::optional<uint64_t> host_memory;  // per node
  std::optional<uint64_t> nvme;         // free space per node
  int ranks_per_node() const { return ranks / nodes; }
};

struct Estimate {
  MemoryPeaks per_rank;                      // each entry the largest over the ranks
  MemoryPeaks per_node;                      // each entry the largest over the nodes of their ranks' sum
  int cpu_threads = 0;                       // a CPU rank's threads, as zero-worker would choose them here
  std::vector<PlannedBuffer> rank0_buffers;  // what rank 0 allocates, buffer by buffer
  // zero_optimization.micro_batch_grads as the job would run it there
  // (MicroBatchGradsChoice).
  MicroBatchGrads grads_mode = MicroBatchGrads::kF32;
  std::string grads_line, grads_why;
  // zero_optimization.accumulation likewise (AccumulationChoice).
  Accumulation accumulation = Accumulation::kMicroBatch;
  std::string accumulation_line, accumulation_why;
};

// The plans of every rank of `cfg` on `machines`.
absl::StatusOr<Estimate> estimate_memory(const JobConfig& cfg, const Machines& machines);

// Peaks by tier and category as the run summary's memory_peak, each tier
// with its "total".
nlohmann::json peaks_json(const MemoryPeaks& p);

// A capacity of the machines against what an estimate needs of it.
struct CapacityCheck {
  std::string what;  // "GPU memory per GPU"
  uint64_t capacity, needed;
  bool fits() const { return needed <= capacity; }
};
// Each capacity `m` describes (GPU memory per GPU; host memory per node,
// pinned included; NVMe space per node) against `e`.
std::vector<CapacityCheck> capacity_checks(const Machines& m, const Estimate& e);

// The memory techniques one after another, each row adding one to the
// rows before it (plain fp32 AdamW; bf16; 8-bit states; activation
// checkpointing; ZeRO stages 1, 2 and 3 over the machines' ranks; the
// optimizer on the host; optimizer and parameters on NVMe), the rest of
// `cfg` as it is: each row's name and estimate.
absl::StatusOr<std::vector<std::pair<std::string, Estimate>>> estimate_techniques(const JobConfig& cfg,
                                                                                  const Machines& machines);

// The command: argv as after "zeroctl" (argv[0] "estimate"). Exit status 0
// with the estimate (whether or not it fits), 2 for bad input.
int run_estimate(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
