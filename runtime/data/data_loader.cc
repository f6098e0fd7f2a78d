#include "runtime/data/data_loader.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "runtime/data/dataset.h"
#include "runtime/data/portable_random.h"

namespace zerod {

void DataLoader::plan(const DataConfig& cfg, MemoryPlan& plan) {
  // A rank whose data cannot be sized here stops at loading it, before it
  // allocates anything else; `zeroctl estimate` says it did not count it.
  const absl::StatusOr<int64_t> windows = dataset_windows(cfg);
  if (windows.ok()) plan.add(order_buffer(*windows - held_out_windows(cfg.seed, *windows, held_out_share(cfg))));
}

absl::StatusOr<DataLoader> DataLoader::create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank,
                                              int world_size, MemoryAccountant& acct, bool windowed, bool packed,
                                              double held_out) {
  if (packed && !windowed) return absl::InvalidArgumentError("a packed dataset's loader must be windowed too");
  const WindowReader reader(tokens, seq_len, windowed, packed);
  const int64_t all = reader.num_windows(), windows = all - held_out_windows(seed, all, held_out);
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat("data.eval.fraction ", held_out, " holds out every window of the ",
                                                   all, " data has, leaving none to train on"));
  }
  const BufferSpec spec = order_buffer(windows);
  ZEROD_ASSIGN_OR_RETURN(Buffer order, Buffer::allocate(spec.bytes, spec.category, *spec.tier, acct));
  return DataLoader(reader, seed, rank, world_size, std::move(order), windows, held_out);
}

// Expects at least one window, which load_dataset checks.
DataLoader::DataLoader(WindowReader reader, uint64_t seed, int rank, int world_size, Buffer order, int64_t windows,
                       double held_out)
    : reader_(std::move(reader)),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      num_windows_(windows),
      held_out_(held_out),
      order_(std::move(order)) {
  shuffle_epoch();
}

void DataLoader::shuffle_epoch() {
  int64_t* order = order_.host<int64_t>();
  for (int64_t w = 0, i = 0; i < num_windows_; ++w) {
    if (!held_out_window(seed_, w, held_out_)) order[i++] = w;
  }
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + state_.epoch);
  portable_shuffle(order, static_cast<size_t>(num_windows_), rng);
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
  const bool windowed = reader_.windowed();
  const int T = reader_.seq_len();
  int64_t counted = windowed ? 0 : static_cast<int64_t>(global) * T;
  for (uint64_t i = 0; i < global; ++i) {
    const int64_t w = order_.host<int64_t>()[(state_.position + i) % n];
    const int64_t b = static_cast<int64_t>(i) - static_cast<int64_t>(rank_) * B;
    const bool mine = b >= 0 && b < B;
    if (!mine && !windowed) continue;
    const int64_t at = b * T;
    const int64_t c = reader_.read(w, mine ? inputs + at : nullptr, mine ? targets + at : nullptr,
                                   mine && positions != nullptr ? positions + at : nullptr);
    if (windowed) counted += c;
  }
  state_.position += global;
  return counted;
}

void DataLoader::set_state(const State& s) {
  state_ = s;
  shuffle_epoch();
}

}  // namespace zerod
