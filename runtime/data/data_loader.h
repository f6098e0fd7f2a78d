// The walk over a dataset's windows: shuffled by seed and epoch, each
// rank's part of every global batch, its position saved with checkpoints.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/core/status.h"
#include "runtime/data/data_config.h"
#include "runtime/data/token_stream.h"

namespace zerod {

// Cuts the stream into windows of seq_len + 1 tokens (input and shifted
// target), each starting where the last one's targets end, and walks them in
// an order shuffled by seed and epoch. Rank r of world w takes windows
// [pos + r*B, pos + (r+1)*B) of each global batch of w*B windows, so the
// union over ranks is the single-process batch. A windowed dataset's
// windows are its examples, seq_len ids each; a target the mask leaves out
// (and a window's last) is -1, which the loss skips. A packed one's windows
// hold several documents each: a document's first id (kDocStart) is never
// the target of the id before it, and a token's position is counted from
// its document's start, so that no document need see another's.
class DataLoader {
 public:
  // The window order is `acct`'s (fails past its host limit); `packed`
  // (Dataset::packed) needs `windowed`.
  static absl::StatusOr<DataLoader> create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank = 0,
                                           int world_size = 1, MemoryAccountant& acct = MemoryAccountant::global(),
                                           bool windowed = false, bool packed = false);
  // What create() allocates for `cfg`'s data, when it can be read here.
  static void plan(const DataConfig& cfg, MemoryPlan& plan);
  // The order of `windows` windows, in host memory: what create()
  // allocates and plan() states.
  static BufferSpec order_buffer(int64_t windows) {
    return {"data order", Category::kWorkspace, static_cast<uint64_t>(windows) * sizeof(int64_t), 1, Tier::kHost};
  }
  static int64_t num_windows(int64_t tokens, int seq_len, bool windowed) {
    return windowed ? tokens / seq_len : tokens == 0 ? 0 : (tokens - 1) / seq_len;
  }

  // Fills inputs/targets (B*seq_len each) with this rank's next micro-batch
  // and returns the targets (not -1) of all ranks' windows of that batch;
  // `positions`, when given, with each token's position in its document
  // (in its window, unless the dataset is packed).
  int64_t next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr);
  bool windowed() const { return windowed_; }
  bool packed() const { return packed_; }

  struct State {
    uint64_t epoch = 0;
    uint64_t position = 0;  // windows consumed in this epoch, all ranks together
  };
  State state() const { return state_; }
  void set_state(const State& s);
  int64_t num_windows() const { return num_windows_; }

 private:
  DataLoader(const TokenStream* tokens, int seq_len, uint64_t seed, int rank, int world_size, Buffer order,
             bool windowed, bool packed);
  void shuffle_epoch();
  // Window w's ids into window_ and its inputs and targets (a windowed
  // one's only when inputs is not null) and, when not null, positions;
  // returns its targets.
  int64_t read_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions);
  int64_t read_masked_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions);

  const TokenStream* tokens_;
  int seq_len_;
  uint64_t seed_;
  int rank_, world_size_;
  bool windowed_, packed_;
  int64_t num_windows_;
  Buffer order_;  // num_windows_ int64 window indices
  State state_;
  std::vector<uint32_t> window_;  // one window's ids as read
};

}  // namespace zerod
