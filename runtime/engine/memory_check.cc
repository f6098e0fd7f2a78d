#include "runtime/engine/memory_check.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "offload/swap_dir.h"
#include "runtime/engine/fit.h"

namespace zerod {
namespace {

// "optimizer 1.2 GiB, params 300 MiB": the tiers' categories, largest first.
std::string categories_text(const MemoryPeaks& p, const std::vector<Tier>& tiers) {
  std::vector<std::pair<uint64_t, Category>> by_size;
  for (int c = 0; c < kNumCategories; ++c) {
    uint64_t bytes = 0;
    for (Tier t : tiers) bytes += p.peak[static_cast<int>(t)][c];
    if (bytes > 0) by_size.push_back({bytes, static_cast<Category>(c)});
  }
  std::ranges::sort(by_size, std::greater<>());
  std::string parts;
  for (const auto& [bytes, c] : by_size) {
    absl::StrAppend(&parts, parts.empty() ? "" : ", ", category_name(c), " ", byte_size_text(bytes));
  }
  return parts;
}

// The offload files of `local_ranks` ranks against their directories' free
// space: parameters in offload_param's nvme_path, the rest (states,
// gradients) in offload_optimizer's.
absl::Status check_nvme_plan(const ZeroConfig& z, int local_ranks, const MemoryPeaks& p) {
  const int nvme = static_cast<int>(Tier::kNvme);
  const int params = static_cast<int>(Category::kParams);
  const uint64_t param_bytes = p.peak[nvme][params], other_bytes = p.total[nvme] - param_bytes;
  std::vector<SwapFile> files;
  const std::tuple<const OffloadConfig*, uint64_t, const char*> tiers[] = {
      {&z.offload_optimizer, other_bytes, "zero_optimization.offload_optimizer.nvme_path"},
      {&z.offload_param, param_bytes, "zero_optimization.offload_param.nvme_path"}};
  for (const auto& [o, bytes, key] : tiers) {
    if (o->device != OffloadDevice::kNvme || bytes == 0) continue;
    files.push_back({*o->nvme_path, bytes * local_ranks, key});
  }
  absl::Status s = check_swap_dirs(files);
  if (!absl::IsFailedPrecondition(s)) return s;
  return absl::FailedPreconditionError(absl::StrCat(
      s.message(), " (", local_ranks, local_ranks == 1 ? " rank" : " ranks", " on this node, each ",
      categories_text(p, {Tier::kNvme}), ")"));
}

}  // namespace

std::string what_sets_the_size(const JobConfig& cfg) {
  const GptConfig& m = cfg.model;
  return absl::StrCat("the model (model.preset '", cfg.preset, "', n_layer ", m.n_layer, ", n_embd ", m.n_embd,
                      ", vocab_size ", m.vocab_size, ") has ", gpt_param_count(m), " parameters, at micro-batch ",
                      cfg.micro_batch, " x seq_len ", cfg.data.seq_len,
                      ": a smaller model or batch, run.host_memory_limit / run.gpu_memory_limit, or "
                      "zero_optimization offload would change that");
}

uint64_t host_memory_per_rank(const JobConfig& cfg, int local_ranks, const NodeMemory& node) {
  if (cfg.run.host_memory_limit && *cfg.run.host_memory_limit > 0) return *cfg.run.host_memory_limit;
  return node.bytes / static_cast<uint64_t>(std::max(1, local_ranks));
}

absl::Status check_memory_plan(const JobConfig& cfg, int rank, int local_ranks, const MemoryPeaks& p,
                               const NodeMemory& node) {
  const auto total = [&](Tier t) { return p.total[static_cast<int>(t)]; };
  const bool job_says = cfg.run.host_memory_limit && *cfg.run.host_memory_limit > 0;
  struct Limit {
    uint64_t held, limit;
    std::string says;  // "<says> N bytes (...), but rank r would hold ..."
    std::vector<Tier> tiers;
    const char* memory;
    const char* or_else;  // what else the user can do
  };
  const Limit limits[] = {
      {p.host_total(), host_memory_per_rank(cfg, local_ranks, node),
       job_says ? "run.host_memory_limit is"
                : absl::StrCat("this node's memory (", node.what, ", ", byte_size_text(node.bytes), "), shared by ",
                               local_ranks, local_ranks == 1 ? " rank" : " ranks", ", gives a rank"),
       {Tier::kHost, Tier::kPinned}, total(Tier::kPinned) > 0 ? "host memory (pinned included)" : "host memory",
       job_says ? "" : "; run.host_memory_limit checks the plan against another figure"},
      {total(Tier::kGpu), cfg.run.gpu_memory_limit.value_or(0), "run.gpu_memory_limit is", {Tier::kGpu},
       "gpu memory", ""}};
  for (const Limit& l : limits) {
    if (l.limit == 0 || l.held <= l.limit) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        l.says, " ", l.limit, " bytes (", byte_size_text(l.limit), "), but rank ", rank, " would hold ", l.held,
        " bytes (", byte_size_text(l.held), ") of ", l.memory, ", ", byte_size_text(l.held - l.limit),
        " more: ", categories_text(p, l.tiers), "; ", what_sets_the_size(cfg), l.or_else,
        " (zeroctl estimate --buffers shows each buffer)"));
  }
  return check_nvme_plan(cfg.zero, local_ranks, p);
}

std::string fit_advice(const nlohmann::json& root, const JobConfig& cfg, int world_size, bool gpu,
                       uint64_t host_memory) {
  Machines m;
  m.ranks = m.nodes = world_size;  // the limits are each rank's
  m.gpu = gpu;
  m.host_memory = host_memory;
  if (const std::optional<uint64_t>& limit = cfg.run.gpu_memory_limit; limit && *limit > 0) m.gpu_memory = *limit;
  if (!m.host_memory && !m.gpu_memory) return "";
  absl::StatusOr<std::vector<FitCandidate>> all = fit_job(root, m, {}, {});
  if (!all.ok() || all->empty()) return "";
  const auto fitting = std::ranges::count_if(*all, &FitCandidate::fits);
  if (fitting == 0) return "no configuration zeroctl estimate --fit tries fits these limits";
  if (all->front().changes.empty()) return "";  // the limits are not what refuses it
  return absl::StrCat("zeroctl estimate --fit finds ", fitting, fitting == 1 ? " configuration" : " configurations",
                      " that fit; the fastest by its cost model: --set ", absl::StrJoin(all->front().changes, " --set "));
}

}  // namespace zerod
