#include "runtime/data/data_loader.h"

#include <numeric>
#include <random>

#include "runtime/data/dataset.h"
#include "runtime/data/portable_random.h"
#include "runtime/data/token_shard.h"

namespace zerod {

void DataLoader::plan(const DataConfig& cfg, MemoryPlan& plan) {
  // A rank whose data cannot be sized here stops at loading it, before it
  // allocates anything else; `zeroctl estimate` says it did not count it.
  const absl::StatusOr<int64_t> windows = dataset_windows(cfg);
  if (windows.ok()) plan.add(order_buffer(*windows));
}

absl::StatusOr<DataLoader> DataLoader::create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank,
                                              int world_size, MemoryAccountant& acct, bool windowed, bool packed) {
  if (packed && !windowed) return absl::InvalidArgumentError("a packed dataset's loader must be windowed too");
  const BufferSpec spec = order_buffer(num_windows(tokens->size(), seq_len, windowed));
  ZEROD_ASSIGN_OR_RETURN(Buffer order, Buffer::allocate(spec.bytes, spec.category, *spec.tier, acct));
  return DataLoader(tokens, seq_len, seed, rank, world_size, std::move(order), windowed, packed);
}

// Expects at least one window, which load_dataset checks.
DataLoader::DataLoader(const TokenStream* tokens, int seq_len, uint64_t seed, int rank, int world_size, Buffer order,
                       bool windowed, bool packed)
    : tokens_(tokens),
      seq_len_(seq_len),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      windowed_(windowed),
      packed_(packed),
      num_windows_(num_windows(tokens->size(), seq_len, windowed)),
      order_(std::move(order)),
      window_(seq_len + 1) {
  shuffle_epoch();
}

void DataLoader::shuffle_epoch() {
  int64_t* order = order_.host<int64_t>();
  std::iota(order, order + num_windows_, int64_t{0});
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + state_.epoch);
  portable_shuffle(order, static_cast<size_t>(num_windows_), rng);
}

int64_t DataLoader::read_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions) {
  if (windowed_) return read_masked_window(w, inputs, targets, positions);
  tokens_->read(w * seq_len_, seq_len_ + 1, window_.data());
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
int64_t DataLoader::read_masked_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions) {
  tokens_->read(w * seq_len_, seq_len_, window_.data());
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

int64_t DataLoader::next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* positions) {
  const uint64_t global = static_cast<uint64_t>(world_size_) * B;
  const auto n = static_cast<uint64_t>(num_windows_);
  // A batch that does not fit the rest of the epoch starts the next one. When
  // even a fresh epoch holds fewer than `global` windows (tiny data), the batch
  // wraps around the permutation instead, so each batch is then its own epoch.
  if (state_.position > 0 && state_.position + global > n) {
    ++state_.epoch;
    state_.position = 0;
    shuffle_epoch();
  }
  // Every rank reads the other ranks' windows' masks too, so that each
  // knows the batch's targets without a collective.
  int64_t counted = windowed_ ? 0 : static_cast<int64_t>(global) * seq_len_;
  for (uint64_t i = 0; i < global; ++i) {
    const int64_t w = order_.host<int64_t>()[(state_.position + i) % n];
    const int64_t b = static_cast<int64_t>(i) - static_cast<int64_t>(rank_) * B;
    const bool mine = b >= 0 && b < B;
    if (!mine && !windowed_) continue;
    const int64_t at = b * seq_len_;
    const int64_t c = read_window(w, mine ? inputs + at : nullptr, mine ? targets + at : nullptr,
                                  mine && positions != nullptr ? positions + at : nullptr);
    if (windowed_) counted += c;
  }
  state_.position += global;
  return counted;
}

void DataLoader::set_state(const State& s) {
  state_ = s;
  shuffle_epoch();
}

}  // namespace zerod
