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
#include "runtime/data/window_reader.h"

namespace zerod {

// Walks a stream's windows (window_reader.h) in an order shuffled by seed
// and epoch. Rank r of world w takes windows [pos + r*B, pos + (r+1)*B) of
// each global batch of w*B windows, so the union over ranks is the
// single-process batch. The windows data.eval.fraction holds out
// (held_out_window) are never walked.
//
// With data.sources, each window of the global batches is drawn from a
// source: the i-th since the run began from the first source whose
// cumulative share of the weights passes indexed_draw(seed, i), the same
// on every rank and at every world size; each source walks its own
// windows in an order shuffled by seed, source and its own epoch, which
// starts over when its windows are all drawn.
class DataLoader {
 public:
  // A source of data.sources: its range of the stream and weight.
  struct Source {
    int64_t begin, tokens;
    double weight;
  };
  // The window order is `acct`'s (fails past its host limit); `packed`
  // (Dataset::packed) needs `windowed`; `held_out`: data.eval.fraction, the
  // share of windows left to the evaluation (one window at least must be
  // left to train on).
  // `sources`: data.sources (none holds windows out).
  static absl::StatusOr<DataLoader> create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank = 0,
                                           int world_size = 1, MemoryAccountant& acct = MemoryAccountant::global(),
                                           bool windowed = false, bool packed = false, double held_out = 0,
                                           const std::vector<Source>& sources = {});
  // What create() allocates for `cfg`'s data, when it can be read here.
  static void plan(const DataConfig& cfg, MemoryPlan& plan);
  // data.eval.fraction of cfg's data, or 0.
  static double held_out_share(const DataConfig& cfg) { return cfg.eval ? cfg.eval->fraction : 0; }
  // The order of `windows` windows, in host memory: what create()
  // allocates and plan() states.
  static BufferSpec order_buffer(int64_t windows) {
    return {"data order", Category::kWorkspace, static_cast<uint64_t>(windows) * sizeof(int64_t), 1, Tier::kHost};
  }

  // Fills inputs/targets (B*seq_len each) with this rank's next micro-batch
  // and returns the targets (not -1) of all ranks' windows of that batch;
  // `positions`, when given, with each token's position in its document
  // (in its window, unless the dataset is packed).
  int64_t next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr);
  bool windowed() const { return reader_.windowed(); }
  bool packed() const { return reader_.packed(); }

  struct State {
    uint64_t epoch = 0;
    uint64_t position = 0;        // windows consumed in this epoch (with sources: ever), all ranks together
    std::vector<uint64_t> taken;  // with sources: the windows drawn from each, all ranks together
  };
  State state() const { return state_; }
  // With sources, `s.taken` holds one count a source.
  void set_state(const State& s);
  // The windows it walks: all but the held-out ones.
  int64_t num_windows() const { return num_windows_; }

 private:
  // A source's walk: its windows' order in order_ from `offset`, and the
  // cumulative share of the weights up to and with it.
  struct Walk {
    WindowReader reader;
    int64_t windows, offset;
    double through;
  };
  DataLoader(WindowReader reader, uint64_t seed, int rank, int world_size, Buffer order, int64_t windows,
             double held_out, std::vector<Walk> walks);
  void shuffle_epoch();
  // Source s's order for its epoch `taken[s] / windows`.
  void shuffle_source(size_t s);
  // The source window `slot` of the run is drawn from.
  size_t draw_source(uint64_t slot) const;
  // Reads the window `w` of `reader` as the `i`-th of the global batch:
  // into this rank's part of the buffers when it is its own; returns its
  // targets (for a windowed dataset whoever's it is).
  int64_t read_slot(WindowReader& reader, int64_t w, uint64_t i, int B, int32_t* inputs, int32_t* targets,
                    int32_t* positions);

  WindowReader reader_;
  uint64_t seed_;
  int rank_, world_size_;
  int64_t num_windows_;
  double held_out_;
  Buffer order_;             // num_windows_ int64 window indices
  std::vector<Walk> walks_;  // data.sources'
  State state_;
};

}  // namespace zerod
