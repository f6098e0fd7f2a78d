#include "runtime/engine/estimate.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/config/command_line.h"
#include "runtime/core/exit_codes.h"
#include "runtime/data/dataset.h"
#include "runtime/engine/fit.h"
#include "runtime/engine/micro_batch_grads.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/telemetry/run_output.h"

namespace zerod {

absl::StatusOr<Estimate> estimate_memory(const JobConfig& cfg, const Machines& machines) {
  Estimate e;
  KernelMemory kernels;
  PlanDevice device;
  if (machines.gpu) {
    kernels.backend = KernelBackend::kCuda;
    device = {Tier::kGpu, /*pins=*/true, /*caches_blocks=*/true, machines.gpu_memory.value_or(0)};
  } else {
    e.cpu_threads = choose_threads(cfg.run.threads, machines.ranks_per_node()).threads;
    kernels.cpu_threads = e.cpu_threads;
  }
  device.host_memory = machines.host_memory.value_or(0);
  // A job that resumes is counted as reading another partition's files (the larger case).
  const auto resume = cfg.run.resume ? Trainer::ResumeFrom::kOtherPartition : Trainer::ResumeFrom::kNothing;
  JobConfig resolved = cfg;  // decided once, not again by each rank's plan
  ZEROD_ASSIGN_OR_RETURN(const AccumulationChoice order,
                         resolve_accumulation(cfg, machines.ranks, kernels, device, resume));
  order.apply(resolved);
  e.accumulation_line = accumulation_line(resolved);
  e.accumulation = resolved.zero.accumulation;
  e.accumulation_why = resolved.accumulation_why;
  ZEROD_ASSIGN_OR_RETURN(const MicroBatchGradsChoice grads,
                         resolve_micro_batch_grads(resolved, machines.ranks, kernels, device, resume));
  e.grads_mode = grads.mode;
  e.grads_line = grads.line();
  e.grads_why = grads.why;
  grads.apply(resolved.zero);
  const int per_node = machines.ranks_per_node();
  for (int node = 0; node < machines.nodes; ++node) {
    MemoryPeaks sum;
    for (int rank = node * per_node; rank < (node + 1) * per_node; ++rank) {
      MemoryPlan plan(device);
      ZEROD_RETURN_IF_ERROR(Trainer::plan(resolved, machines.ranks, rank, kernels, plan, resume));
      const MemoryPeaks p = plan.peaks();
      if (rank == 0) e.rank0_buffers = plan.buffers();
      for (int t = 0; t < kNumTiers; ++t) {
        for (int c = 0; c < kNumCategories; ++c) {
          e.per_rank.peak[t][c] = std::max(e.per_rank.peak[t][c], p.peak[t][c]);
          sum.peak[t][c] += p.peak[t][c];
        }
        e.per_rank.total[t] = std::max(e.per_rank.total[t], p.total[t]);
        sum.total[t] += p.total[t];
      }
    }
    for (int t = 0; t < kNumTiers; ++t) {
      for (int c = 0; c < kNumCategories; ++c) e.per_node.peak[t][c] = std::max(e.per_node.peak[t][c], sum.peak[t][c]);
      e.per_node.total[t] = std::max(e.per_node.total[t], sum.total[t]);
    }
  }
  return e;
}

absl::StatusOr<std::vector<std::pair<std::string, Estimate>>> estimate_techniques(const JobConfig& cfg,
                                                                                  const Machines& machines) {
  JobConfig c = cfg;
  c.precision = DType::kF32;
  c.optimizer.type = OptimizerType::kAdamW;
  c.activation_checkpointing = c.cpu_checkpointing = false;
  c.zero.stage = 0;
  c.zero.offload_optimizer.device = c.zero.offload_param.device = OffloadDevice::kNone;
  // A plan reads no path: any stands for the NVMe the machines have.
  const std::string nvme = "nvme_path";
  const std::pair<std::string, std::function<void(JobConfig&)>> steps[] = {
      {"plain fp32, AdamW", [](JobConfig&) {}},
      {"+ bf16 mixed precision", [](JobConfig& j) { j.precision = DType::kBF16; }},
      {"+ 8-bit Adam states", [](JobConfig& j) { j.optimizer.type = OptimizerType::kAdamW8bit; }},
      {"+ activation checkpointing", [](JobConfig& j) { j.activation_checkpointing = true; }},
      {"+ ZeRO stage 1", [](JobConfig& j) { j.zero.stage = 1; }},
      {"+ ZeRO stage 2", [](JobConfig& j) { j.zero.stage = 2; }},
      {"+ ZeRO stage 3", [](JobConfig& j) { j.zero.stage = 3; }},
      {"+ optimizer on the host (cpu offload)",
       [](JobConfig& j) { j.zero.offload_optimizer.device = OffloadDevice::kCpu; }},
      {"+ optimizer and parameters on NVMe",
       [&nvme](JobConfig& j) {
         for (OffloadConfig* o : {&j.zero.offload_optimizer, &j.zero.offload_param}) {
           o->device = OffloadDevice::kNvme;
           o->nvme_path = nvme;
         }
       }},
  };
  std::vector<std::pair<std::string, Estimate>> rows;
  for (const auto& [name, apply] : steps) {
    apply(c);
    ZEROD_ASSIGN_OR_RETURN(Estimate e, estimate_memory(c, machines));
    rows.emplace_back(name, std::move(e));
  }
  return rows;
}

nlohmann::json peaks_json(const MemoryPeaks& p) {
  nlohmann::json j = memory_peak_json(p);
  for (int t = 0; t < kNumTiers; ++t) j[tier_name(static_cast<Tier>(t))]["total"] = p.total[t];
  return j;
}

std::vector<CapacityCheck> capacity_checks(const Machines& m, const Estimate& e) {
  auto total = [](const MemoryPeaks& p, Tier t) { return p.total[static_cast<int>(t)]; };
  std::vector<CapacityCheck> out;
  if (m.gpu_memory) out.push_back({"GPU memory per GPU", *m.gpu_memory, total(e.per_rank, Tier::kGpu)});
  // Pinned memory is the host's too.
  if (m.host_memory) {
    out.push_back(
        {"host memory per node", *m.host_memory, total(e.per_node, Tier::kHost) + total(e.per_node, Tier::kPinned)});
  }
  if (m.nvme) out.push_back({"NVMe space per node", *m.nvme, total(e.per_node, Tier::kNvme)});
  return out;
}

namespace {

void table(std::ostream& out, const std::string& title, const MemoryPeaks& p) {
  out << absl::StrFormat("%-34s", title);
  for (int c = 0; c < kNumCategories; ++c) out << absl::StrFormat(" %11s", category_name(static_cast<Category>(c)));
  out << absl::StrFormat(" %11s\n", "total");
  for (int t = 0; t < kNumTiers; ++t) {
    if (p.total[t] == 0) continue;
    out << absl::StrFormat("  %-32s", tier_name(static_cast<Tier>(t)));
    for (int c = 0; c < kNumCategories; ++c) out << absl::StrFormat(" %11s", byte_size_text(p.peak[t][c]));
    out << absl::StrFormat(" %11s\n", byte_size_text(p.total[t]));
  }
}

absl::StatusOr<uint64_t> capacity(const std::string& flag, const std::string& text) {
  auto bytes = parse_byte_size(text);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", bytes.status().message()));
  if (*bytes == 0) return absl::InvalidArgumentError(absl::StrCat(flag, " must be more than 0 bytes"));
  return *bytes;
}

}  // namespace

int run_estimate(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"zeroctl estimate: a job's memory per rank and per node, in each tier and category, before it runs"};
  std::string config_path, device, gpu_memory, host_memory, nvme;
  std::vector<std::string> overrides;
  int ranks = 0, nodes = 1, gpus_per_node = 0;
  bool json = false, buffers = false, techniques = false;
  app.add_option("--config", config_path, "job config (JSON)")->required();
  app.add_option("--set", overrides, "override a config key: key.path=value (JSON value)");
  app.add_option("--ranks", ranks, "ranks in all (default: nodes x gpus-per-node, else 1)");
  app.add_option("--nodes", nodes, "machines the ranks are spread over evenly (default 1)");
  app.add_option("--gpus-per-node", gpus_per_node, "GPUs of each node, one rank each");
  app.add_option("--gpu-memory", gpu_memory, "memory of each GPU, e.g. 80GiB");
  app.add_option("--host-memory", host_memory, "host memory of each node, e.g. 512GiB");
  app.add_option("--nvme", nvme, "free space on each node's nvme_path, e.g. 2TB");
  app.add_option("--device", device, "cpu or cuda (default: run.device; auto is cuda when GPUs are described)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_flag("--json", json, "one JSON object instead of tables");
  app.add_flag("--buffers", buffers, "also list rank 0's buffers, largest first");
  app.add_flag("--techniques", techniques,
               "also the memory techniques one after another (fp32, bf16, 8-bit, checkpointing, ZeRO 1-3, offload)");
  bool fit = false;
  int top = 10;
  std::vector<std::string> allow;
  std::string out_path, nvme_path;
  std::string pcie, network, nvme_rate, host_rate;
  FitRates rates;
  app.add_flag("--fit", fit, "the configurations that fit the described machines, fastest first, and the best one");
  app.add_option("--top", top, "--fit: how many to list (10)")->check(CLI::PositiveNumber);
  app.add_option("--allow", allow,
                 "--fit may also change numerics: bf16 (fp32 jobs), 8bit (AdamW jobs), nf4 (a LoRA job's base: QLoRA)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "8bit", "nf4"}));
  std::vector<int> lora_ranks;
  app.add_option("--lora-ranks", lora_ranks,
                 "--fit: the adapter ranks a LoRA job may take, e.g. 8,16,32,64 (the largest that fits is preferred; "
                 "alpha keeps the job's scale)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--out", out_path, "--fit: write the best config to this file");
  app.add_option("--nvme-path", nvme_path, "--fit: where NVMe offload keeps its files when the config names none");
  app.add_option("--flops", rates.flops,
                 "--fit: model FLOP/s a rank achieves (default: measured, see docs/memory-plan.md)")
      ->check(CLI::PositiveNumber);
  app.add_option("--pcie-bandwidth", pcie, "--fit: bytes/s between a GPU and host memory, e.g. 25GB");
  app.add_option("--network-bandwidth", network, "--fit: bytes/s a rank moves in collectives, e.g. 12.5GB");
  app.add_option("--nvme-bandwidth", nvme_rate, "--fit: bytes/s of a node's NVMe, e.g. 3GB");
  app.add_option("--host-bandwidth", host_rate, "--fit: bytes/s a host optimizer streams through memory, e.g. 20GB");
  app.add_option("--dequantize-rate", rates.dequantize,
                 "--fit: NF4 weights/s a rank dequantizes (default: see docs/memory-plan.md)")
      ->check(CLI::PositiveNumber);
  if (auto code = parse_command_line(app, "zeroctl estimate", out, err, [&] { app.parse(argc, argv); })) return *code;

  auto refuse = [&](const absl::Status& s) {
    err << "zeroctl estimate: error: " << s.message() << "\n";
    return exit_code_for(s);
  };
  Machines m;
  m.nodes = nodes;
  if (nodes < 1) return refuse(absl::InvalidArgumentError(absl::StrCat("--nodes must be at least 1, got ", nodes)));
  if (app.count("--gpus-per-node") && gpus_per_node < 1) {
    return refuse(absl::InvalidArgumentError(absl::StrCat("--gpus-per-node must be at least 1, got ", gpus_per_node)));
  }
  if (app.count("--ranks")) {
    if (ranks < 1) return refuse(absl::InvalidArgumentError(absl::StrCat("--ranks must be at least 1, got ", ranks)));
    if (gpus_per_node > 0 && ranks != nodes * gpus_per_node) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("--ranks ", ranks, " is not --nodes ", nodes, " x --gpus-per-node ", gpus_per_node)));
    }
    m.ranks = ranks;
  } else {
    m.ranks = gpus_per_node > 0 ? nodes * gpus_per_node : nodes;
  }
  if (m.ranks % nodes != 0) {
    return refuse(
        absl::InvalidArgumentError(absl::StrCat("--ranks ", m.ranks, " cannot be spread evenly over --nodes ", nodes)));
  }
  for (auto [flag, text, into] :
       {std::tuple{"--gpu-memory", &gpu_memory, &m.gpu_memory},
        std::tuple{"--host-memory", &host_memory, &m.host_memory}, std::tuple{"--nvme", &nvme, &m.nvme}}) {
    if (!app.count(flag)) continue;
    auto bytes = capacity(flag, *text);
    if (!bytes.ok()) return refuse(bytes.status());
    *into = *bytes;
  }
  for (auto [flag, text, into] :
       {std::tuple{"--pcie-bandwidth", &pcie, &rates.pcie}, std::tuple{"--network-bandwidth", &network, &rates.network},
        std::tuple{"--nvme-bandwidth", &nvme_rate, &rates.nvme},
        std::tuple{"--host-bandwidth", &host_rate, &rates.host_bandwidth}}) {
    if (!app.count(flag)) continue;
    auto bytes = capacity(flag, *text);
    if (!bytes.ok()) return refuse(bytes.status());
    *into = static_cast<double>(*bytes);
  }
  auto cfg = load_job_config(config_path, overrides, m.ranks);
  if (!cfg.ok()) return refuse(cfg.status());
  const bool gpus_described = app.count("--gpu-memory") || app.count("--gpus-per-node");
  if (device.empty()) device = cfg->run.device == "auto" ? (gpus_described ? "cuda" : "cpu") : cfg->run.device;
  m.gpu = device == "cuda";
  if (!m.gpu && gpus_described) {
    return refuse(absl::InvalidArgumentError(
        "--gpu-memory and --gpus-per-node describe GPUs, but the job trains on the CPU (run.device or --device cpu)"));
  }
  if (fit) {
    if (!m.gpu_memory && !m.host_memory && !m.nvme) {
      return refuse(absl::InvalidArgumentError(
          "--fit needs the machines' memory to fit into: --gpu-memory, --host-memory or --nvme"));
    }
    FitOptions options;
    options.allow_bf16 = std::ranges::count(allow, "bf16") > 0;
    options.allow_8bit = std::ranges::count(allow, "8bit") > 0;
    options.allow_nf4 = std::ranges::count(allow, "nf4") > 0;
    options.lora_ranks = lora_ranks;
    if (!nvme_path.empty()) options.nvme_path = nvme_path;
    auto root = load_job_json(config_path, overrides);
    if (!root.ok()) return refuse(root.status());
    return report_fit(*root, m, rates, options, top, json, out_path, out, err);
  }
  auto e = estimate_memory(*cfg, m);
  if (!e.ok()) return refuse(e.status());
  // Files not on this machine leave their windows' order out of the plan.
  const absl::Status data = dataset_tokens(cfg->data).status();
  std::vector<std::pair<std::string, Estimate>> rows;
  if (techniques) {
    auto t = estimate_techniques(*cfg, m);
    if (!t.ok()) return refuse(t.status());
    rows = *std::move(t);
  }

  const std::vector<CapacityCheck> all = capacity_checks(m, *e);
  const bool fits = std::ranges::all_of(all, &CapacityCheck::fits);
  const int64_t params = gpt_param_count(cfg->model);
  // With LoRA the adapters alone are trained; the model's weights are frozen.
  const int64_t trained = cfg->lora ? lora_param_count(cfg->model, cfg->lora->adapters) : params;
  if (json) {
    nlohmann::json j = {{"event", "estimate"},
                        {"world_size", m.ranks},
                        {"nodes", m.nodes},
                        {"ranks_per_node", m.ranks_per_node()},
                        {"device", device},
                        {"params", params},
                        {"zero_stage", cfg->zero.stage},
                        {"trained_params", trained},
                        {"per_rank", peaks_json(e->per_rank)},
                        {"per_node", peaks_json(e->per_node)},
                        {"fits", fits},
                        {"micro_batch_grads", micro_batch_grads_name(e->grads_mode)}};
    if (!e->grads_why.empty()) j["micro_batch_grads_auto"] = e->grads_why;
    j["accumulation"] = accumulation_name(e->accumulation);
    if (!e->accumulation_why.empty()) j["accumulation_auto"] = e->accumulation_why;
    if (!m.gpu) j["cpu_threads"] = e->cpu_threads;
    if (!data.ok()) j["data_not_counted"] = std::string(data.message());
    nlohmann::json caps = nlohmann::json::array();
    for (const CapacityCheck& c : all) {
      caps.push_back({{"what", c.what}, {"capacity", c.capacity}, {"needed", c.needed}, {"fits", c.fits()}});
    }
    j["capacity"] = caps;
    if (buffers) {
      nlohmann::json list = nlohmann::json::array();
      for (const PlannedBuffer& b : e->rank0_buffers) {
        list.push_back({{"what", b.what},
                        {"tier", tier_name(b.tier)},
                        {"category", category_name(b.category)},
                        {"count", b.count},
                        {"bytes", b.bytes},
                        {"from", phase_name(b.from)},
                        {"kept", b.kept}});
      }
      j["rank0_buffers"] = list;
    }
    if (techniques) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& [name, r] : rows) list.push_back({{"technique", name}, {"per_rank", peaks_json(r.per_rank)}});
      j["techniques"] = list;
    }
    out << j.dump() << "\n";
    return kExitOk;
  }
  const std::string lora = cfg->lora
                               ? absl::StrFormat(" (frozen%s), LoRA adapters of %d parameters (r %d on %s)",
                                                 cfg->lora->nf4_base ? ", in NF4" : "", trained, cfg->lora->adapters.r,
                                                 lora_targets_text(cfg->lora->adapters, cfg->model.arch))
                               : "";
  out << absl::StrFormat("memory estimate: %s model, %d parameters%s; ZeRO stage %d; %d rank%s on %d node%s, %s\n",
                         cfg->preset, params, lora, cfg->zero.stage, m.ranks, m.ranks == 1 ? "" : "s", m.nodes,
                         m.nodes == 1 ? "" : "s",
                         m.gpu ? std::string("one GPU a rank")
                               : absl::StrCat("CPU (", e->cpu_threads, e->cpu_threads == 1 ? " thread" : " threads",
                                              " a rank, as zero-worker would choose on this machine)"));
  if (!data.ok()) {
    out << "data not counted: " << data.message() << " (its window order takes 8 bytes a window on every rank)\n";
  }
  if (!e->accumulation_line.empty()) out << e->accumulation_line << "\n";
  if (!e->grads_line.empty()) out << e->grads_line << "\n";
  table(out, "per rank (the largest over ranks)", e->per_rank);
  if (m.ranks_per_node() > 1) table(out, "per node (the sum of its ranks)", e->per_node);
  if (buffers) {
    std::vector<PlannedBuffer> list = e->rank0_buffers;
    std::ranges::stable_sort(list, std::greater<>(), &PlannedBuffer::bytes);
    out << "rank 0's buffers, largest first\n";
    for (const PlannedBuffer& b : list) {
      out << absl::StrFormat("  %11s  %-6s %-11s %s%s%s\n", byte_size_text(b.bytes), tier_name(b.tier),
                             category_name(b.category), b.what, b.count > 1 ? absl::StrCat(" (", b.count, ")") : "",
                             b.from == Phase::kBuild ? "" : absl::StrCat(", from the ", phase_name(b.from), " on"));
    }
  }
  if (techniques) {
    out << absl::StrFormat("techniques, each adding to those above (per rank, %d rank%s)\n%-42s", m.ranks,
                           m.ranks == 1 ? "" : "s", "");
    for (int t = 0; t < kNumTiers; ++t) out << absl::StrFormat(" %11s", tier_name(static_cast<Tier>(t)));
    out << "\n";
    for (const auto& [name, r] : rows) {
      out << absl::StrFormat("  %-40s", name);
      for (int t = 0; t < kNumTiers; ++t) out << absl::StrFormat(" %11s", byte_size_text(r.per_rank.total[t]));
      out << "\n";
    }
  }
  for (const CapacityCheck& c : all) {
    out << absl::StrFormat("%s %s: needs %s, %s\n", c.what, byte_size_text(c.capacity), byte_size_text(c.needed),
                           c.fits() ? absl::StrCat("fits (", byte_size_text(c.capacity - c.needed), " to spare)")
                                    : absl::StrCat("does not fit (", byte_size_text(c.needed - c.capacity), " short)"));
  }
  return kExitOk;
}

}  // namespace zerod
