#include "runtime/engine/fit.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/checkpoint/output_file.h"
#include "runtime/core/exit_codes.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/nf4_weights.h"

namespace zerod {

FitRates fit_rates(FitRates r, DType precision, const Machines& machines, int cpu_threads) {
  // bench/RESULTS.md: zerod's gpt2-xl step (B 8 x T 1024, bf16) on an
  // H200, 23,919 tokens/s of 6N + 12LTC FLOPs each; its fp32 step on the
  // CPU, 144.8 GFLOP/s on two threads.
  constexpr double kGpu16BitFlops = 2.46e14, kH100Fp32OverBf16 = 67.0 / 989.0, kCpuFlopsPerThread = 7.24e10;
  if (r.flops <= 0) {
    r.flops = !machines.gpu                 ? kCpuFlopsPerThread * std::max(1, cpu_threads)
              : precision == DType::kF32 ? kGpu16BitFlops * kH100Fp32OverBf16
                                         : kGpu16BitFlops;
  }
  if (r.pcie <= 0) r.pcie = 2.13e10;  // gradient shards to pinned memory (gpt2-xl offload, H100)
  if (r.host_bandwidth <= 0) r.host_bandwidth = 1e10;
  if (r.network <= 0) r.network = 1e10;
  if (r.nvme <= 0) r.nvme = 2e9;
  if (r.dequantize <= 0) {
    // The CPU's transposed dequantization of 64M weights on two threads,
    // 0.40 G weights/s (bench/RESULTS.md); a GPU's at 70% of an H200's HBM.
    constexpr double kCpuWeightsPerThread = 2e8, kGpuBandwidth = 0.7 * 4.8e12, kNf4BytesPerWeight = 0.516;
    r.dequantize = machines.gpu ? kGpuBandwidth / (kNf4BytesPerWeight + dtype_size(precision))
                                : kCpuWeightsPerThread * std::max(1, cpu_threads);
  }
  return r;
}

StepCost step_cost(const JobConfig& cfg, const Machines& machines, const FitRates& rates) {
  const GptConfig& m = cfg.model;
  // The trained parameters: the model's, or with LoRA the adapters' (the
  // model's weights are then frozen: `frozen` of them, whose bytes are
  // gathered at stage 3: NF4's packed layers and the globals as operands,
  // the working precision on a GPU, fp32 on the CPU; or the working
  // precision's).
  const double model = static_cast<double>(gpt_param_count(m));
  const double psi = cfg.lora ? static_cast<double>(lora_param_count(m, cfg.lora->adapters)) : model;
  const double frozen = cfg.lora ? model : 0;
  const double n = machines.ranks, T = cfg.data.seq_len, accum = cfg.grad_accum;
  // The step's fetches of a layer and sends of its gradients: one a
  // micro-batch, or one a step layer by layer.
  const double passes = gradient_passes(cfg);
  const int stage = cfg.zero.stage;
  // Bytes of a parameter as the kernels read it, of a gradient as it is
  // reduced (always fp32), and of a parameter's Adam states.
  const double param_bytes = dtype_size(cfg.precision), grad_bytes = 4;
  double gathered_frozen = 0;  // bytes
  if (cfg.lora && stage == 3) {
    const DType operands = machines.gpu ? cfg.precision : DType::kF32;
    gathered_frozen =
        cfg.lora->nf4_base ? static_cast<double>(Nf4Packing(GptLayout(m)).model_bytes(operands)) : frozen * param_bytes;
  }
  const double state_bytes = cfg.optimizer.type == OptimizerType::kAdamW8bit ? 2 : 8;
  const double optimizer_share = stage == 0 ? psi : psi / n;  // the parameters a rank updates
  const double shard = psi / n;
  StepCost c;

  // Forward 2 FLOPs a parameter a token and backward 4 (2 for a frozen
  // weight, which needs no gradient of its own), plus attention's products
  // (the bench's count: 4 forward, 8 backward); checkpointing runs each
  // forward again.
  const double attention = 4.0 * m.n_layer * T * m.n_embd, forward = 2 * (psi + frozen) + attention;
  const double per_token =
      forward + 4 * psi + 2 * frozen + 2 * attention + (cfg.activation_checkpointing ? forward : 0);
  c.compute = per_token * cfg.micro_batch * accum * T / rates.flops;
  if (cfg.lora && cfg.lora->nf4_base) {
    // A QLoRA base's linear layers are dequantized a layer at a time for
    // each micro-step's forward and again for its backward (checkpointing's
    // recompute uses the backward's).
    double weights = 0;
    for (const LinearModule& mod : linear_modules(m)) weights += double(mod.dims.in) * mod.dims.out;
    c.dequantize = 2 * accum * m.n_layer * weights / rates.dequantize;
  }

  const OffloadDevice opt = cfg.zero.offload_optimizer.device, param = cfg.zero.offload_param.device;
  const bool host_optimizer = !machines.gpu || opt != OffloadDevice::kNone;
  if (host_optimizer) {
    // One pass: gradient read, master and states read and written, the
    // 16-bit copy written.
    const double touched = grad_bytes + 8 + 2 * state_bytes + (cfg.precision == DType::kF32 ? 0 : param_bytes);
    c.optimizer = optimizer_share * touched / rates.host_bandwidth;
  }

  if (machines.gpu) {
    double bytes = 0;
    // Gradients go down as they are reduced (each pass from stage 2 on),
    // the updated parameters come back up.
    if (opt != OffloadDevice::kNone) bytes += optimizer_share * (grad_bytes * (stage >= 2 ? passes : 1) + param_bytes);
    // Offloaded parameter shards come up for every gather: forward and backward.
    if (param != OffloadDevice::kNone) bytes += 2 * passes * (shard * param_bytes + gathered_frozen / n);
    // Block inputs in pinned host memory cross the link three times a
    // micro-batch: written going up, read by the next block, read again
    // for the recompute.
    if (cfg.activation_checkpointing && cfg.cpu_checkpointing) {
      bytes += 3 * accum * (m.n_layer + 1) * cfg.micro_batch * T * m.n_embd * param_bytes;
    }
    c.pcie = bytes / rates.pcie;
  }

  if (n > 1) {
    // A ring moves (N-1)/N of a buffer in and out of each rank; an all-reduce twice that.
    const double ring = (n - 1) / n;
    double bytes = 0;
    if (stage == 0) bytes = 2 * ring * grad_bytes * psi;
    if (stage == 1) bytes = ring * (grad_bytes + param_bytes) * psi;
    if (stage == 2) bytes = ring * (grad_bytes * passes + param_bytes) * psi;
    if (stage == 3) bytes = ring * ((grad_bytes + 2 * param_bytes) * psi + 2 * gathered_frozen) * passes;
    c.network = bytes / rates.network;
  }

  double nvme_bytes = 0;  // a rank's
  if (opt == OffloadDevice::kNvme) nvme_bytes += 2 * optimizer_share * (4 + state_bytes);
  if (param == OffloadDevice::kNvme) {
    nvme_bytes += (2 * passes + 1) * shard * param_bytes + 2 * passes * gathered_frozen / n;
  }
  c.nvme = nvme_bytes * machines.ranks_per_node() / rates.nvme;
  return c;
}

namespace {

// One point of the search.
struct Choice {
  int stage;
  OffloadDevice optimizer, params;
  bool checkpointing;
  int micro_batch;
  bool layer;             // zero_optimization.accumulation "layer"
  bool host_checkpoints;  // activation_checkpointing.cpu_checkpointing
  bool bf16, eight_bit;
  int lora_r;  // 0: no adapters
  bool nf4;
};

const char* device_text(OffloadDevice d) {
  return d == OffloadDevice::kNone ? "\"none\"" : d == OffloadDevice::kCpu ? "\"cpu\"" : "\"nvme\"";
}

// The --set assignments that take `base` to `c`; `alpha_key` is the name
// the job gives LoRA's alpha (PEFT's lora_alpha or zerod's alpha).
std::vector<std::string> changes_for(const JobConfig& base, const Choice& c, int world_size,
                                     const std::optional<std::string>& nvme_path, const std::string& alpha_key) {
  std::vector<std::string> out;
  if (c.stage != base.zero.stage) out.push_back(absl::StrCat("zero_optimization.stage=", c.stage));
  for (const auto& [key, device, was] :
       {std::tuple{"offload_optimizer", c.optimizer, &base.zero.offload_optimizer},
        std::tuple{"offload_param", c.params, &base.zero.offload_param}}) {
    if (device == was->device) continue;
    out.push_back(absl::StrCat("zero_optimization.", key, ".device=", device_text(device)));
    if (device == OffloadDevice::kNvme && !was->nvme_path) {
      out.push_back(absl::StrCat("zero_optimization.", key, ".nvme_path=", nlohmann::json(*nvme_path).dump()));
    }
  }
  if (c.checkpointing != base.activation_checkpointing) {
    out.push_back(absl::StrCat("activation_checkpointing.enabled=", c.checkpointing ? "true" : "false"));
  }
  if (const Accumulation order = c.layer ? Accumulation::kLayer : Accumulation::kMicroBatch;
      order != base.zero.accumulation) {
    out.push_back(absl::StrCat("zero_optimization.accumulation=\"", accumulation_name(order), "\""));
  }
  if (c.host_checkpoints && !base.cpu_checkpointing) out.push_back("activation_checkpointing.cpu_checkpointing=true");
  if (c.micro_batch != base.micro_batch) {
    out.push_back(absl::StrCat("train_micro_batch_size_per_gpu=", c.micro_batch));
    out.push_back(absl::StrCat("gradient_accumulation_steps=", base.train_batch_size / world_size / c.micro_batch));
    out.push_back(absl::StrCat("train_batch_size=", base.train_batch_size));
  }
  if (c.bf16 && base.precision != DType::kBF16) out.push_back("bf16.enabled=true");
  if (c.eight_bit && base.optimizer.type != OptimizerType::kAdamW8bit) out.push_back("optimizer.type=\"AdamW8bit\"");
  if (base.lora && c.lora_r != base.lora->adapters.r) {
    // alpha moves with r so that the adapters' scale (alpha / r, or alpha /
    // sqrt(r) with rsLoRA) stays the job's.
    const LoraConfig& a = base.lora->adapters;
    const double ratio = double(c.lora_r) / a.r;
    out.push_back(absl::StrCat("model.lora.r=", c.lora_r));
    out.push_back(absl::StrCat("model.lora.", alpha_key, "=",
                               nlohmann::json(a.alpha * (a.use_rslora ? std::sqrt(ratio) : ratio)).dump()));
  }
  if (base.lora && c.nf4 && !base.lora->nf4_base) out.push_back("model.lora.base_quant=\"nf4\"");
  return out;
}

// Each value once, in order.
template <typename T>
std::vector<T> distinct(std::initializer_list<T> values) {
  std::vector<T> out;
  for (const T& v : values) {
    if (std::ranges::find(out, v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<Choice> choices(const JobConfig& base, const Machines& m, bool nvme, const FitOptions& options) {
  // On a CPU the host is the device's own memory: "cpu" offload moves nothing.
  std::vector<OffloadDevice> places = {OffloadDevice::kNone};
  if (m.gpu) places.push_back(OffloadDevice::kCpu);
  if (nvme) places.push_back(OffloadDevice::kNvme);
  std::vector<int> micro_batches;
  const int64_t per_rank = base.train_batch_size / m.ranks;
  for (int64_t d = 1; d <= per_rank; ++d) {
    if (per_rank % d == 0) micro_batches.push_back(static_cast<int>(d));
  }
  const bool is_bf16 = base.precision == DType::kBF16, is_8bit = base.optimizer.type == OptimizerType::kAdamW8bit;
  const auto bf16s = distinct({is_bf16, is_bf16 || (options.allow_bf16 && base.precision == DType::kF32)});
  const auto eight_bits =
      distinct({is_8bit, is_8bit || (options.allow_8bit && base.optimizer.type == OptimizerType::kAdamW)});
  std::vector<int> ranks = {base.lora ? base.lora->adapters.r : 0};
  if (base.lora && !options.lora_ranks.empty()) {
    ranks.clear();
    for (int r : options.lora_ranks) {
      if (std::ranges::find(ranks, r) == ranks.end()) ranks.push_back(r);
    }
  }
  // The micro-batches' orders, micro-batch by micro-batch and (with
  // checkpointing and several micro-batches) layer by layer, each with its
  // block inputs where the job keeps them and, checkpointed on a GPU
  // machine, in pinned host memory.
  const auto orders = [&](bool ckpt, bool several) {
    const bool host_too = ckpt && m.gpu && !base.cpu_checkpointing;
    std::vector<std::pair<bool, bool>> o = {{false, base.cpu_checkpointing}};
    if (host_too) o.push_back({false, true});
    if (ckpt && several) {
      o.push_back({true, base.cpu_checkpointing});
      if (host_too) o.push_back({true, true});
    }
    return o;
  };
  const bool is_nf4 = base.lora && base.lora->nf4_base;
  const auto nf4s = distinct({is_nf4, is_nf4 || (options.allow_nf4 && base.lora)});
  std::vector<Choice> out;
  for (int stage = 0; stage <= 3; ++stage) {
    for (OffloadDevice opt : places) {
      for (OffloadDevice param : places) {
        if (param != OffloadDevice::kNone && stage != 3) continue;
        for (bool ckpt : {false, true}) {
          for (int micro : micro_batches) {
            for (const auto& [layer, host] : orders(ckpt, micro < per_rank)) {
              for (bool bf16 : bf16s) {
                for (bool eight_bit : eight_bits) {
                  for (int r : ranks) {
                    for (bool nf4 : nf4s) {
                      out.push_back({stage, opt, param, ckpt, micro, layer, host, bf16, eight_bit, r, nf4});
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

namespace {

// Bytes past the machines' capacities, summed over them (0: fits).
uint64_t shortfall(const Machines& machines, const Estimate& e) {
  uint64_t short_by = 0;
  for (const CapacityCheck& check : capacity_checks(machines, e)) {
    if (!check.fits()) short_by += check.needed - check.capacity;
  }
  return short_by;
}

}  // namespace

absl::StatusOr<std::vector<FitCandidate>> fit_job(const nlohmann::json& root, const Machines& machines,
                                                  const FitRates& given, const FitOptions& options) {
  ZEROD_ASSIGN_OR_RETURN(const JobConfig base, parse_job_config(root, machines.ranks));
  for (int r : options.lora_ranks) {
    if (!base.lora) return absl::InvalidArgumentError("--lora-ranks: the job trains no adapters (no model.lora)");
    if (base.lora->init_from) {
      return absl::InvalidArgumentError(
          "--lora-ranks: the job starts from the adapters in model.lora.init_from, whose rank is theirs");
    }
    LoraConfig a = base.lora->adapters;
    a.r = r;
    if (absl::Status s = validate_lora_config(a, base.model.arch); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--lora-ranks ", r, ": ", s.message()));
    }
    if (absl::Status s = validate_lora_rank(a, base.model); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--lora-ranks ", r, ": ", s.message()));
    }
  }
  const std::string alpha_key =
      root.contains(nlohmann::json::json_pointer("/model/lora/lora_alpha")) ? "lora_alpha" : "alpha";
  std::optional<std::string> nvme_path = base.zero.offload_optimizer.nvme_path;
  if (!nvme_path) nvme_path = base.zero.offload_param.nvme_path;
  if (!nvme_path) nvme_path = options.nvme_path;
  std::vector<FitCandidate> out;
  for (const Choice& choice : choices(base, machines, nvme_path.has_value(), options)) {
    FitCandidate c;
    c.changes = changes_for(base, choice, machines.ranks, nvme_path, alpha_key);
    c.config = root;
    for (const std::string& change : c.changes) ZEROD_RETURN_IF_ERROR(apply_override(c.config, change));
    absl::StatusOr<JobConfig> cfg = parse_job_config(c.config, machines.ranks);
    if (!cfg.ok()) continue;  // a combination the reader refuses (e.g. super_offload below stage 2)
    c.cfg = *std::move(cfg);
    ZEROD_ASSIGN_OR_RETURN(c.estimate, estimate_memory(c.cfg, machines));
    c.cost = step_cost(c.cfg, machines, fit_rates(given, c.cfg.precision, machines, c.estimate.cpu_threads));
    c.shortfall = shortfall(machines, c.estimate);
    out.push_back(std::move(c));
  }
  // Fitting first, the largest rank first, fastest first, the fewest
  // changes among equals; then the least short.
  const auto rank = [](const FitCandidate& c) { return c.cfg.lora ? -c.cfg.lora->adapters.r : 0; };
  std::ranges::stable_sort(out, [&](const FitCandidate& a, const FitCandidate& b) {
    return std::tuple(a.shortfall, a.fits() ? rank(a) : 0, a.cost.total(), a.changes.size()) <
           std::tuple(b.shortfall, b.fits() ? rank(b) : 0, b.cost.total(), b.changes.size());
  });
  return out;
}

int64_t model_positions(const JobConfig& cfg) {
  if (cfg.preset != "custom") {
    if (absl::StatusOr<GptConfig> p = gpt_preset(cfg.preset); p.ok()) return p->block_size;
  }
  if (cfg.init_from) {
    if (absl::StatusOr<GptConfig> hf = read_hf_config(*cfg.init_from); hf.ok()) return hf->block_size;
  }
  return cfg.model.block_size;
}

absl::StatusOr<int64_t> longest_seq_len(const FitCandidate& c, const Machines& machines, int64_t positions,
                                        int64_t beyond) {
  if (c.cfg.model.arch != Arch::kLlama) return 0;
  constexpr int64_t kStep = 128;
  const int64_t longest = std::min<int64_t>(positions, 131072);
  const auto fits = [&](int64_t t) -> absl::StatusOr<bool> {
    nlohmann::json config = c.config;
    config["data"]["seq_len"] = t;
    config["model"]["block_size"] = std::max<int64_t>(t, c.cfg.model.block_size);
    ZEROD_ASSIGN_OR_RETURN(const JobConfig cfg, parse_job_config(config, machines.ranks));
    ZEROD_ASSIGN_OR_RETURN(const Estimate e, estimate_memory(cfg, machines));
    return shortfall(machines, e) == 0;
  };
  // The plan grows with the length: the longest that fits, by halves
  // between one that does and one that does not.
  int64_t lo = c.cfg.data.seq_len / kStep, hi = longest / kStep + 1;  // in steps: lo fits, hi does not
  if (beyond >= c.cfg.data.seq_len) {
    if (beyond + kStep > longest) return 0;
    ZEROD_ASSIGN_OR_RETURN(const bool longer, fits(beyond + kStep));
    if (!longer) return 0;
    lo = (beyond + kStep) / kStep;
  } else {
    ZEROD_ASSIGN_OR_RETURN(const bool own, fits(c.cfg.data.seq_len));
    if (!own) return 0;
  }
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    ZEROD_ASSIGN_OR_RETURN(const bool f, fits(mid * kStep));
    (f ? lo : hi) = mid;
  }
  return std::max(lo * kStep, static_cast<int64_t>(c.cfg.data.seq_len));
}

namespace {

std::string per_second(double v, const char* unit) {
  return v >= 1e12 ? absl::StrFormat("%.3g T%s/s", v / 1e12, unit) : absl::StrFormat("%.3g G%s/s", v / 1e9, unit);
}

double tokens_per_second(const FitCandidate& c) {
  return static_cast<double>(c.cfg.train_batch_size) * c.cfg.data.seq_len / c.cost.total();
}

nlohmann::json candidate_json(const FitCandidate& c) {
  return {{"changes", c.changes},
          {"fits", c.fits()},
          {"shortfall", c.shortfall},
          {"seconds_per_step", c.cost.total()},
          {"tokens_per_s", tokens_per_second(c)},
          {"cost",
           {{"compute", c.cost.compute},
            {"optimizer", c.cost.optimizer},
            {"pcie", c.cost.pcie},
            {"network", c.cost.network},
            {"nvme", c.cost.nvme},
            {"dequantize", c.cost.dequantize}}},
          {"per_rank", peaks_json(c.estimate.per_rank)}};
}

absl::Status write_config(const std::string& path, const nlohmann::json& config) {
  const std::string text = config.dump(2) + "\n";
  ZEROD_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(path));
  ZEROD_RETURN_IF_ERROR(f.append(text.data(), text.size()));
  return f.finish();
}

}  // namespace

int report_fit(const nlohmann::json& root, const Machines& machines, const FitRates& rates, const FitOptions& options,
               int top, bool json, const std::string& out_path, std::ostream& out, std::ostream& err) {
  auto refuse = [&](const absl::Status& s) {
    err << "zeroctl estimate: error: " << s.message() << "\n";
    return exit_code_for(s);
  };
  absl::StatusOr<std::vector<FitCandidate>> all = fit_job(root, machines, rates, options);
  if (!all.ok()) return refuse(all.status());
  const auto fitting = std::ranges::count_if(*all, &FitCandidate::fits);
  const FitCandidate* best = fitting > 0 ? &all->front() : nullptr;
  if (best && !out_path.empty()) {
    if (absl::Status s = write_config(out_path, best->config); !s.ok()) return refuse(s);
  }
  const FitRates used = fit_rates(rates, all->empty() ? DType::kF32 : all->front().cfg.precision, machines,
                                  all->empty() ? 0 : all->front().estimate.cpu_threads);
  // The longest sequences: the best's, and any fitting configuration's
  // at the smallest micro-batch (at a larger one the same configuration
  // holds more a token), the fastest of the longest.
  int64_t longest = 0, any_longest = 0;
  size_t any = 0;
  if (best) {
    const int64_t positions = model_positions(best->cfg);  // every candidate's model is the job's
    absl::StatusOr<int64_t> t = longest_seq_len(*best, machines, positions);
    if (!t.ok()) return refuse(t.status());
    longest = *t;
    int smallest = best->cfg.micro_batch;
    for (int64_t i = 0; i < fitting; ++i) smallest = std::min(smallest, (*all)[i].cfg.micro_batch);
    for (int64_t i = 0; i < fitting; ++i) {
      if ((*all)[i].cfg.micro_batch != smallest) continue;
      t = longest_seq_len((*all)[i], machines, positions, std::max(longest, any_longest));
      if (!t.ok()) return refuse(t.status());
      if (*t > std::max(longest, any_longest)) any_longest = *t, any = i;
    }
  }
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < std::min<int64_t>(top, fitting); ++i) list.push_back(candidate_json((*all)[i]));
    nlohmann::json j = {{"event", "fit"},
                        {"world_size", machines.ranks},
                        {"nodes", machines.nodes},
                        {"candidates", all->size()},
                        {"fitting", fitting},
                        {"rates",
                         {{"flops", used.flops},
                          {"host_bandwidth", used.host_bandwidth},
                          {"pcie", used.pcie},
                          {"network", used.network},
                          {"nvme", used.nvme},
                          {"dequantize", used.dequantize}}},
                        {"configurations", list},
                        {"best_config", best ? best->config : nlohmann::json()}};
    if (longest > 0) j["longest_seq_len"] = longest;
    if (any_longest > longest) {
      j["longest_seq_len_any"] = {{"seq_len", any_longest}, {"changes", (*all)[any].changes}};
    }
    if (!best && !all->empty()) j["closest"] = candidate_json(all->front());
    out << j.dump() << "\n";
    return best ? kExitOk : kExitFailure;
  }
  out << absl::StrFormat("fit: %d of %d configurations fit %d rank%s on %d node%s, fastest first by the cost model\n",
                         fitting, all->size(), machines.ranks, machines.ranks == 1 ? "" : "s", machines.nodes,
                         machines.nodes == 1 ? "" : "s");
  out << absl::StrFormat(
      "cost model, per rank: %s of model FLOPs, host optimizer %s, PCIe %s, network %s, NVMe %s a node, NF4 "
      "dequantization %s; nothing overlapped\n",
      per_second(used.flops, "FLOP"), per_second(used.host_bandwidth, "B"), per_second(used.pcie, "B"),
      per_second(used.network, "B"), per_second(used.nvme, "B"), per_second(used.dequantize, " weights"));
  if (!best) {
    if (all->empty()) {
      out << "no configuration of this job can be tried\n";
      return kExitFailure;
    }
    const FitCandidate& c = all->front();
    out << "no configuration fits; the closest ("
        << (c.changes.empty() ? std::string("the job as it is") : absl::StrJoin(c.changes, " ")) << ") needs:\n";
    for (const CapacityCheck& check : capacity_checks(machines, c.estimate)) {
      out << absl::StrFormat(
          "  %s %s: needs %s%s\n", check.what, byte_size_text(check.capacity), byte_size_text(check.needed),
          check.fits() ? "" : absl::StrCat(", ", byte_size_text(check.needed - check.capacity), " short"));
    }
    return kExitFailure;
  }
  out << absl::StrFormat("%4s %9s %10s", "#", "s/step", "tokens/s");
  for (int t = 0; t < kNumTiers; ++t) out << absl::StrFormat(" %10s", tier_name(static_cast<Tier>(t)));
  out << "  changes (--set); memory per rank\n";
  for (int i = 0; i < std::min<int64_t>(top, fitting); ++i) {
    const FitCandidate& c = (*all)[i];
    out << absl::StrFormat("%4d %9.4g %10.0f", i + 1, c.cost.total(), tokens_per_second(c));
    for (int t = 0; t < kNumTiers; ++t) out << absl::StrFormat(" %10s", byte_size_text(c.estimate.per_rank.total[t]));
    out << "  " << (c.changes.empty() ? std::string("(the job as it is)") : absl::StrJoin(c.changes, " ")) << "\n";
  }
  if (longest > 0) {
    out << absl::StrFormat("the longest sequence that fits, in steps of 128: data.seq_len %d with the best (micro-batch %d)",
                           longest, best->cfg.micro_batch);
    if (any_longest > longest) {
      const FitCandidate& c = (*all)[any];
      out << absl::StrFormat(", %d with any (micro-batch %d; %s)", any_longest, c.cfg.micro_batch,
                             c.changes.empty() ? std::string("the job as it is") : absl::StrJoin(c.changes, " "));
    }
    out << "\n";
  }
  out << (out_path.empty() ? std::string("the best, a config zero-worker accepts:\n")
                           : absl::StrCat("the best, a config zero-worker accepts, written to ", out_path, ":\n"))
      << best->config.dump(2) << "\n";
  return kExitOk;
}

}  // namespace zerod
