// The held-out set a run evaluates (data.eval): every window of a dataset
// of its own, in order, or the windows of the training data that
// data.eval.fraction holds out (held_out_window), in order.
#pragma once

#include <cstdint>

#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/core/status.h"
#include "runtime/data/data_config.h"
#include "runtime/data/dataset.h"
#include "runtime/data/window_reader.h"

namespace zerod {

// data.eval's own dataset as a DataConfig load_dataset reads (cut into
// cfg.seq_len windows as the training data is); cfg.eval must give a path.
DataConfig eval_dataset_config(const DataConfig& cfg);

class EvalWindows {
 public:
  // Over `eval`: data.eval's own dataset, or for a fraction the training
  // data. Refuses a set of no window or no target, naming it; the
  // fraction's window list is `acct`'s.
  static absl::StatusOr<EvalWindows> create(const DataConfig& cfg, const Dataset& eval, MemoryAccountant& acct);
  // What create() allocates for cfg's held-out set, when it can be read here.
  static void plan(const DataConfig& cfg, MemoryPlan& plan);
  static BufferSpec window_list(int64_t windows) {
    return {"eval windows", Category::kWorkspace, static_cast<uint64_t>(windows) * sizeof(int64_t), 1, Tier::kHost};
  }
  // Whether the held-out set is packed (its windows read positions).
  static absl::StatusOr<bool> packed(const DataConfig& cfg);

  int64_t size() const { return size_; }
  bool packed() const { return reader_.packed(); }
  // Window i of the set, as WindowReader::read (inputs not null); returns
  // its targets.
  int64_t read(int64_t i, int32_t* inputs, int32_t* targets, int32_t* positions) {
    return reader_.read(window(i), inputs, targets, positions);
  }

 private:
  EvalWindows(WindowReader reader, Buffer list, int64_t size)
      : reader_(std::move(reader)), list_(std::move(list)), size_(size) {}
  // The data's window that is the set's i-th.
  int64_t window(int64_t i) const { return list_.bytes() ? list_.host<int64_t>()[i] : i; }

  WindowReader reader_;
  Buffer list_;  // a fraction's windows; none for a dataset of its own
  int64_t size_;
};

}  // namespace zerod
