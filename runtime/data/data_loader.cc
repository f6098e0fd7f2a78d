#include "runtime/data/data_loader.h"

#include <numeric>
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
                                              double held_out, const std::vector<Source>& sources) {
  if (packed && !windowed) return absl::InvalidArgumentError("a packed dataset's loader must be windowed too");
  if (!sources.empty() && held_out > 0)
    return absl::InvalidArgumentError("data.eval.fraction splits one dataset, not data.sources");
  const WindowReader reader(tokens, seq_len, windowed, packed);
  std::vector<Walk> walks;
  double total = 0, through = 0;
  for (const Source& s : sources) total += s.weight;
  int64_t offset = 0;
  for (const Source& s : sources) {
    WindowReader part(tokens, seq_len, windowed, packed, s.begin, s.tokens);
    const int64_t n = part.num_windows();
    through += s.weight / total;
    walks.push_back({std::move(part), n, offset, through});
    offset += n;
  }
  const int64_t all = walks.empty() ? reader.num_windows() : offset;
  const int64_t windows = all - held_out_windows(seed, all, held_out);
  if (windows == 0) {
    return absl::InvalidArgumentError(absl::StrCat("data.eval.fraction ", held_out, " holds out every window of the ",
                                                   all, " data has, leaving none to train on"));
  }
  const BufferSpec spec = order_buffer(windows);
  ZEROD_ASSIGN_OR_RETURN(Buffer order, Buffer::allocate(spec.bytes, spec.category, *spec.tier, acct));
  return DataLoader(reader, seed, rank, world_size, std::move(order), windows, held_out, std::move(walks));
}

// Expects at least one window, which load_dataset checks.
DataLoader::DataLoader(WindowReader reader, uint64_t seed, int rank, int world_size, Buffer order, int64_t windows,
                       double held_out, std::vector<Walk> walks)
    : reader_(std::move(reader)),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      num_windows_(windows),
      held_out_(held_out),
      order_(std::move(order)),
      walks_(std::move(walks)) {
  state_.taken.assign(walks_.size(), 0);
  set_state(state_);
}

void DataLoader::shuffle_epoch() {
  int64_t* order = order_.host<int64_t>();
  for (int64_t w = 0, i = 0; i < num_windows_; ++w) {
    if (!held_out_window(seed_, w, held_out_)) order[i++] = w;
  }
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + state_.epoch);
  portable_shuffle(order, static_cast<size_t>(num_windows_), rng);
}

void DataLoader::shuffle_source(size_t s) {
  const Walk& walk = walks_[s];
  int64_t* order = order_.host<int64_t>() + walk.offset;
  std::iota(order, order + walk.windows, int64_t{0});
  const uint64_t epoch = state_.taken[s] / static_cast<uint64_t>(walk.windows);
  std::mt19937_64 rng((seed_ + (s + 1) * 0xD1B54A32D192ED03ull) * 0x9E3779B97F4A7C15ull + epoch);
  portable_shuffle(order, static_cast<size_t>(walk.windows), rng);
}

size_t DataLoader::draw_source(uint64_t slot) const {
  // Its own stream of draws: not the held-out windows' of the same seed.
  const double u = indexed_draw(seed_ ^ 0x5DEECE66Dull, slot);
  size_t last = 0;  // the last source with a weight, for a draw rounding put past every share
  for (size_t s = 0; s < walks_.size(); ++s) {
    const double before = s == 0 ? 0 : walks_[s - 1].through;
    if (walks_[s].through == before) continue;  // weight 0: never drawn
    if (u < walks_[s].through) return s;
    last = s;
  }
  return last;
}

int64_t DataLoader::read_slot(WindowReader& reader, int64_t w, uint64_t i, int B, int32_t* inputs, int32_t* targets,
                              int32_t* positions) {
  const int64_t b = static_cast<int64_t>(i) - static_cast<int64_t>(rank_) * B;
  const bool mine = b >= 0 && b < B;
  if (!mine && !reader.windowed()) return reader.seq_len();
  const int64_t at = b * reader.seq_len();
  return reader.read(w, mine ? inputs + at : nullptr, mine ? targets + at : nullptr,
                     mine && positions != nullptr ? positions + at : nullptr);
}

int64_t DataLoader::next_batch(int B, int32_t* inputs, int32_t* targets, int32_t* positions) {
  const uint64_t global = static_cast<uint64_t>(world_size_) * B;
  // Every rank reads the other ranks' windows' masks too, so that each
  // knows the batch's targets without a collective.
  int64_t counted = 0;
  if (!walks_.empty()) {
    for (uint64_t i = 0; i < global; ++i) {
      const size_t s = draw_source(state_.position + i);
      Walk& walk = walks_[s];
      const uint64_t k = state_.taken[s], n = static_cast<uint64_t>(walk.windows);
      if (k > 0 && k % n == 0) shuffle_source(s);  // its next epoch
      ++state_.taken[s];
      const int64_t w = order_.host<int64_t>()[walk.offset + static_cast<int64_t>(k % n)];
      counted += read_slot(walk.reader, w, i, B, inputs, targets, positions);
    }
    state_.position += global;
    return counted;
  }
  const auto n = static_cast<uint64_t>(num_windows_);
  // A batch that does not fit the rest of the epoch starts the next one. When
  // even a fresh epoch holds fewer than `global` windows (tiny data), the batch
  // wraps around the permutation instead, so each batch is then its own epoch.
  if (state_.position > 0 && state_.position + global > n) {
    ++state_.epoch;
    state_.position = 0;
    shuffle_epoch();
  }
  for (uint64_t i = 0; i < global; ++i) {
    const int64_t w = order_.host<int64_t>()[(state_.position + i) % n];
    counted += read_slot(reader_, w, i, B, inputs, targets, positions);
  }
  state_.position += global;
  return counted;
}

void DataLoader::set_state(const State& s) {
  state_ = s;
  if (walks_.empty()) {
    shuffle_epoch();
    return;
  }
  for (size_t i = 0; i < walks_.size(); ++i) shuffle_source(i);
}

}  // namespace zerod
