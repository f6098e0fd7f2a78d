#include "runtime/data/eval_windows.h"

#include "absl/strings/str_cat.h"

namespace zerod {

DataConfig eval_dataset_config(const DataConfig& cfg) {
  DataConfig d;
  d.kind = cfg.eval->kind;
  d.path = cfg.eval->path;
  d.seq_len = cfg.seq_len;
  d.seed = cfg.seed;
  return d;
}

void EvalWindows::plan(const DataConfig& cfg, MemoryPlan& plan) {
  if (!cfg.eval || cfg.eval->fraction == 0) return;
  const absl::StatusOr<int64_t> windows = dataset_windows(cfg);
  if (windows.ok()) plan.add(window_list(held_out_windows(cfg.seed, *windows, cfg.eval->fraction)));
}

absl::StatusOr<bool> EvalWindows::packed(const DataConfig& cfg) {
  return cfg.eval->fraction > 0 ? dataset_packed(cfg) : dataset_packed(eval_dataset_config(cfg));
}

absl::StatusOr<EvalWindows> EvalWindows::create(const DataConfig& cfg, const Dataset& eval, MemoryAccountant& acct) {
  WindowReader reader(&eval.tokens, cfg.seq_len, eval.windowed, eval.packed);
  const int64_t all = reader.num_windows();
  const double fraction = cfg.eval->fraction;
  const std::string name = fraction > 0 ? absl::StrCat("data.eval.fraction ", fraction)
                                        : absl::StrCat("data.eval.path '", cfg.eval->path, "'");
  Buffer list;
  int64_t size = all;
  if (fraction > 0) {
    size = held_out_windows(cfg.seed, all, fraction);
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " holds out none of the ", all, " windows data has: raise it"));
    }
    const BufferSpec spec = window_list(size);
    ZEROD_ASSIGN_OR_RETURN(list, Buffer::allocate(spec.bytes, spec.category, *spec.tier, acct));
    for (int64_t w = 0, i = 0; i < size; ++w) {
      if (held_out_window(cfg.seed, w, fraction)) list.host<int64_t>()[i++] = w;
    }
  }
  EvalWindows set(std::move(reader), std::move(list), size);
  // A set whose mask leaves nothing to score would give no loss.
  bool scored = !eval.windowed;
  for (int64_t i = 0; i < size && !scored; ++i) scored = set.reader_.read(set.window(i), nullptr, nullptr, nullptr) > 0;
  if (!scored) return absl::InvalidArgumentError(absl::StrCat(name, ": no window of it has a target to score"));
  return set;
}

}  // namespace zerod
