#include "runtime/data/window_reader.h"

#include <numeric>

#include "runtime/data/portable_random.h"
#include "runtime/data/token_shard.h"

namespace zerod {

int64_t WindowReader::read(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions) {
  if (windowed_) return read_masked(w, inputs, targets, positions);
  tokens_->read(begin_ + w * seq_len_, seq_len_ + 1, window_.data());
  for (int t = 0; t < seq_len_; ++t) {
    // Ids are below vocab_size (load_dataset), an int.
    inputs[t] = static_cast<int32_t>(window_[t]);
    targets[t] = static_cast<int32_t>(window_[t + 1]);
  }
  if (positions != nullptr) std::iota(positions, positions + seq_len_, 0);
  return seq_len_;
}

// A windowed dataset's window: its targets those the mask keeps and, in a
// packed one, never a document's first id, whatever the file's mask says.
int64_t WindowReader::read_masked(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions) {
  tokens_->read(begin_ + w * seq_len_, seq_len_, window_.data());
  window_[seq_len_] = kNotTarget;  // the next window's first id, never a target
  // The flags no target carries, stripped from the inputs.
  const uint32_t flags = packed_ ? kNotTarget | kDocStart : kNotTarget;
  int64_t counted = 0;
  int start = 0;  // the first index of token t's document
  for (int t = 0; t < seq_len_; ++t) {
    const uint32_t next = window_[t + 1];
    const bool target = (next & flags) == 0;
    counted += target;
    if (inputs == nullptr) continue;
    inputs[t] = static_cast<int32_t>(window_[t] & ~flags);
    targets[t] = target ? static_cast<int32_t>(next) : -1;
    if (positions == nullptr) continue;
    if ((window_[t] & kDocStart) != 0 && packed_) start = t;
    positions[t] = t - start;
  }
  return counted;
}

bool held_out_window(uint64_t seed, int64_t w, double fraction) {
  return fraction > 0 && indexed_draw(seed, static_cast<uint64_t>(w)) < fraction;
}

int64_t held_out_windows(uint64_t seed, int64_t n, double fraction) {
  int64_t held = 0;
  for (int64_t w = 0; fraction > 0 && w < n; ++w) held += held_out_window(seed, w, fraction);
  return held;
}

}  // namespace zerod
