#include "runtime/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerod {
namespace {

constexpr int64_t kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * 4;

using FilePtr = std::unique_ptr<FILE, int (*)(FILE*)>;

// Uniform in [0, n), n > 0. Rejecting the lowest 2^64 mod n raw values leaves
// a range that is a multiple of n, so the modulo is unbiased; unlike
// std::uniform_int_distribution the result is the same on every library.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t reject_below = (0 - n) % n;
  uint64_t x;
  do x = rng();
  while (x < reject_below);
  return x % n;
}

// Fisher–Yates with uniform_below, for the same portability reason.
template <typename T>
void shuffle(T* v, size_t n, std::mt19937_64& rng) {
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[uniform_below(rng, i)]);
}

int32_t load_le32(const unsigned char* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                              uint32_t{p[3]} << 24);
}

void store_le32(int32_t v, unsigned char* p) {
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

std::string file_prefix(const std::string& path) { return absl::StrCat("data file '", path, "'"); }

// Rejects the first id of `ids` from `begin` on that is >= vocab_size (a
// windowed shard's without its flag); `source` names where it came from.
absl::Status check_vocab(const TokenStream& ids, int64_t begin, int vocab_size, const std::string& source,
                         uint32_t flags = 0) {
  const int64_t at = ids.find_at_least(begin, static_cast<uint32_t>(vocab_size), flags);
  if (at < 0) return absl::OkStatus();
  uint32_t id;
  ids.read(at, 1, &id);
  id &= ~flags;
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": token ", id, " (at index ", at - begin, ") is >= vocab_size ", vocab_size));
}

// Where a data file's ids start, how many it holds, their width in bytes
// and, for a windowed shard, its window.
struct FileTokens {
  int64_t offset, count;
  int width;
  int window = 0;
};

// The ids an llm.c shard's header describes, checked against the file's
// `size`; `head` holds the file's first min(size, kHeaderBytes) bytes.
absl::StatusOr<FileTokens> shard_tokens(const std::string& path, const unsigned char* head, int64_t size) {
  const std::string where = file_prefix(path);
  if (size < kHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": only ", size, " bytes, shorter than the ", kHeaderBytes,
                                                   "-byte llm.c shard header"));
  }
  const int32_t magic = load_le32(head), version = load_le32(head + 4), count = load_le32(head + 8);
  if (magic != kTokenShardMagic && magic != kTokenShard32Magic && magic != kWindowShardMagic) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": bad magic ", magic, " (expected ", kTokenShardMagic,
                                                   " or ", kTokenShard32Magic,
                                                   ", an llm.c token shard of 16- or 32-bit ids, or ",
                                                   kWindowShardMagic, ", zerod's windowed shard)"));
  }
  const bool windowed = magic == kWindowShardMagic;
  const bool wide = magic == kTokenShard32Magic || windowed;
  const int32_t want = windowed ? kWindowShardVersion : wide ? kTokenShard32Version : kTokenShardVersion;
  if (version != want) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unsupported version ", version, " (expected ", want,
                                                   " for magic ", magic, ")"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": negative token count ", count, " in the header"));
  }
  const int width = wide ? 4 : 2;
  const int32_t window = windowed ? load_le32(head + 12) : 0;
  if (windowed && (window < 1 || count % window != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the header's window ", window,
                                                   " is not a positive divisor of its token count ", count));
  }
  const int64_t expected = kHeaderBytes + width * int64_t{count};
  if (size != expected) {
    const char* problem = size < expected ? "truncated" : "has trailing bytes";
    return absl::InvalidArgumentError(absl::StrCat(where, " ", problem, ": header says ", count, " tokens of ",
                                                   width, " bytes, so ", expected,
                                                   " bytes expected, but the file has ", size));
  }
  return FileTokens{kHeaderBytes, count, width, window};
}

// The first min(size, kHeaderBytes) bytes of a file and its size.
absl::StatusOr<std::pair<std::string, int64_t>> read_head(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return absl::ErrnoToStatus(errno, absl::StrCat(file_prefix(path), " cannot be opened"));
  std::string head(kHeaderBytes, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f.get()));
  if (std::ferror(f.get()) || std::fseek(f.get(), 0, SEEK_END) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(file_prefix(path), " cannot be read"));
  }
  return std::pair{std::move(head), static_cast<int64_t>(std::ftell(f.get()))};
}

absl::StatusOr<FileTokens> file_tokens(DataKind kind, const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const auto head, read_head(path));
  const auto& [bytes, size] = head;
  if (kind == DataKind::kText) {
    if (size == 0) return absl::InvalidArgumentError(absl::StrCat(file_prefix(path), " is empty"));
    return FileTokens{0, size, 1};
  }
  return shard_tokens(path, reinterpret_cast<const unsigned char*>(bytes.data()), size);
}

// The synthetic stream's layout: segments of `segment` tokens, each starting
// with "\n" and holding whole lines of `line_len` tokens (a line longer than
// a segment gets one of its own). Calls at_line(position) for each of
// `lines` lines in order and returns the stream's length.
template <typename F>
size_t pack_lines(size_t line_len, size_t segment, int lines, F&& at_line) {
  size_t start = 0, size = 1;
  for (int i = 0; i < lines; ++i) {
    if (size > start + 1 && size + line_len > start + segment) {
      start = std::max(size, start + segment);
      size = start + 1;
    }
    at_line(size);
    size += line_len;
  }
  return std::max(size, start + segment);
}

// The synthetic task's operand and result widths.
int operand_width(int max_operand) { return static_cast<int>(std::to_string(std::max(0, max_operand)).size()); }
int sum_width(int max_operand) { return static_cast<int>(std::to_string(2 * std::max(0, max_operand)).size()); }

// A shard of `magic` and `version` holding `tokens`, each sizeof(T) bytes.
template <typename T>
absl::Status write_shard(const std::string& path, const std::vector<T>& tokens, int32_t magic, int32_t version,
                         int32_t window = 0) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(file_prefix(path), ": ", tokens.size(),
                                                   " tokens do not fit an llm.c shard's int32 count"));
  }
  constexpr size_t width = sizeof(T);
  std::string data(kHeaderBytes + width * tokens.size(), '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(data.data());
  store_le32(magic, bytes);
  store_le32(version, bytes + 4);
  store_le32(static_cast<int32_t>(tokens.size()), bytes + 8);
  store_le32(window, bytes + 12);
  unsigned char* p = bytes + kHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t b = 0; b < width; ++b) p[width * i + b] = static_cast<unsigned char>(tokens[i] >> (8 * b));
  }

  // Written aside and renamed into place, so `path` is never left half-written.
  const std::string tmp = path + ".tmp";
  FilePtr f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return absl::ErrnoToStatus(errno, absl::StrCat(file_prefix(tmp), " cannot be created"));
  errno = 0;
  const bool wrote = std::fwrite(data.data(), 1, data.size(), f.get()) == data.size();
  const bool closed = std::fclose(f.release()) == 0;  // flushes, so may fail too (disk full)
  const int err = errno != 0 ? errno : EIO;
  std::error_code ignored;
  if (!wrote || !closed) {
    std::filesystem::remove(tmp, ignored);
    return absl::ErrnoToStatus(err, absl::StrCat(file_prefix(tmp), " could not be written"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ignored);
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("renaming '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> read_token_shard(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(DataKind::kTokens, path));
  std::vector<uint32_t> tokens(f.count);
  if (f.count == 0) return tokens;
  TokenStream ids;
  ZEROD_RETURN_IF_ERROR(ids.append_file(path, f.offset, f.count, f.width));
  ids.read(0, f.count, tokens.data());
  return tokens;
}

absl::Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  return write_shard(path, tokens, kTokenShardMagic, kTokenShardVersion);
}

absl::Status write_token_shard32(const std::string& path, const std::vector<uint32_t>& tokens) {
  return write_shard(path, tokens, kTokenShard32Magic, kTokenShard32Version);
}

absl::Status write_window_shard(const std::string& path, const std::vector<uint32_t>& ids, int window) {
  if (window < 1 || ids.size() % window != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_prefix(path), ": ", ids.size(), " ids are not a whole number of windows of ", window));
  }
  return write_shard(path, ids, kWindowShardMagic, kWindowShardVersion, window);
}

absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (!std::filesystem::exists(pattern, ec)) {
      return absl::NotFoundError(absl::StrCat("data.path '", pattern, "' does not exist"));
    }
    return std::vector<std::string>{pattern};
  }
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    return absl::InternalError(absl::StrCat("data.path '", pattern, "': glob failed (",
                                            rc == GLOB_NOSPACE ? "out of memory" : "read error",
                                            ")"));
  }
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat("data.path '", pattern, "' matches no files"));
  }
  // glob sorts by locale collation; byte order is the same everywhere.
  std::sort(paths.begin(), paths.end());
  return paths;
}

SyntheticTask make_synthetic_task(uint64_t seed, int seq_len, int max_operand, int train_lines,
                                  int heldout_prompts) {
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a <= max_operand; ++a) {
    for (int b = 0; b <= max_operand; ++b) pairs.emplace_back(a, b);
  }

  // The first tenth of a seeded permutation is held out; the rest is training.
  std::mt19937_64 rng(seed);
  shuffle(pairs.data(), pairs.size(), rng);
  const size_t num_heldout = std::min(pairs.size(), std::max<size_t>(1, pairs.size() / 10));

  const int wa = operand_width(max_operand), wc = sum_width(max_operand);
  auto prompt = [&](int a, int b) { return absl::StrFormat("%0*d+%0*d=", wa, a, wa, b); };
  auto answer = [&](int a, int b) { return absl::StrFormat("%0*d", wc, a + b); };

  SyntheticTask task;
  const size_t num_prompts = std::min(num_heldout, static_cast<size_t>(std::max(0, heldout_prompts)));
  for (size_t i = 0; i < num_prompts; ++i) {
    const auto [a, b] = pairs[i];
    task.heldout.emplace_back(prompt(a, b), answer(a, b));
  }
  const size_t num_train = pairs.size() - num_heldout;
  if (num_train == 0) return task;  // max_operand < 1: nothing is left to train on
  const size_t line_len = 2 * wa + wc + 3;
  const size_t segment = static_cast<size_t>(std::max(1, seq_len));
  // Padding and each segment's first token are "\n"; the lines go between.
  std::vector<uint16_t>& out = task.train_tokens;
  out.assign(pack_lines(line_len, segment, train_lines, [](size_t) {}), '\n');
  pack_lines(line_len, segment, train_lines, [&](size_t at) {
    const auto [a, b] = pairs[num_heldout + uniform_below(rng, num_train)];
    for (char c : prompt(a, b) + answer(a, b) + "\n") out[at++] = static_cast<unsigned char>(c);
  });
  return task;
}

int64_t synthetic_task_tokens(int seq_len, int max_operand, int train_lines) {
  if (max_operand < 1) return 0;
  const size_t line_len = 2 * operand_width(max_operand) + sum_width(max_operand) + 3;
  return static_cast<int64_t>(
      pack_lines(line_len, static_cast<size_t>(std::max(1, seq_len)), train_lines, [](size_t) {}));
}

namespace {

// The ids of `cfg`'s files and whether they are windowed shards.
absl::StatusOr<std::pair<int64_t, bool>> data_size(const DataConfig& cfg) {
  if (cfg.kind == DataKind::kSynthetic) return std::pair{synthetic_task_tokens(cfg.seq_len), false};
  ZEROD_ASSIGN_OR_RETURN(const std::vector<std::string> paths, expand_data_path(cfg.path));
  int64_t n = 0;
  bool windowed = false;
  for (size_t i = 0; i < paths.size(); ++i) {
    ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(cfg.kind, paths[i]));
    n += f.count;
    if (i == 0) windowed = f.window > 0;  // load_dataset refuses a mix
  }
  return std::pair{n, windowed};
}

}  // namespace

absl::StatusOr<int64_t> dataset_tokens(const DataConfig& cfg) {
  ZEROD_ASSIGN_OR_RETURN(const auto size, data_size(cfg));
  return size.first;
}

absl::StatusOr<int64_t> dataset_windows(const DataConfig& cfg) {
  ZEROD_ASSIGN_OR_RETURN(const auto size, data_size(cfg));
  return DataLoader::num_windows(size.first, cfg.seq_len, size.second);
}

absl::StatusOr<Dataset> load_dataset(const DataConfig& cfg, int vocab_size) {
  if (cfg.seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.seq_len must be at least 1, got ", cfg.seq_len));
  }
  Dataset ds;
  std::string source;  // names the data in the too-small error
  if (cfg.kind == DataKind::kSynthetic) {
    SyntheticTask task = make_synthetic_task(cfg.seed, cfg.seq_len);
    ds.tokens = TokenStream(std::move(task.train_tokens));
    ds.heldout = std::move(task.heldout);
    source = "synthetic data";
    ZEROD_RETURN_IF_ERROR(check_vocab(ds.tokens, 0, vocab_size, source));
  } else {
    source = absl::StrCat("data.path '", cfg.path, "'");
    if (cfg.kind == DataKind::kText && vocab_size < 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": text data is byte tokens 0..255, so it needs vocab_size >= 256, got ", vocab_size));
    }
    ZEROD_ASSIGN_OR_RETURN(const std::vector<std::string> paths, expand_data_path(cfg.path));
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string& path = paths[i];
      const int64_t begin = ds.tokens.size();
      ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(cfg.kind, path));
      if (i == 0) ds.windowed = f.window > 0;
      if ((f.window > 0) != ds.windowed) {
        return absl::InvalidArgumentError(absl::StrCat(file_prefix(path), ": a ",
                                                       ds.windowed ? "plain token shard" : "windowed shard",
                                                       " among ", ds.windowed ? "windowed" : "plain",
                                                       " ones; one dataset holds one kind"));
      }
      if (ds.windowed && f.window != cfg.seq_len) {
        return absl::InvalidArgumentError(absl::StrCat(file_prefix(path), ": its examples were laid out for seq_len ",
                                                       f.window, ", the job's data.seq_len is ", cfg.seq_len,
                                                       " (zeroctl tokenize --seq-len)"));
      }
      ZEROD_RETURN_IF_ERROR(ds.tokens.append_file(path, f.offset, f.count, f.width));
      // Text's ids are bytes, below any vocabulary it may have (checked above).
      if (cfg.kind == DataKind::kTokens) {
        ZEROD_RETURN_IF_ERROR(
            check_vocab(ds.tokens, begin, vocab_size, file_prefix(path), ds.windowed ? kNotTarget : 0));
      }
    }
  }
  const int64_t window = int64_t{cfg.seq_len} + (ds.windowed ? 0 : 1);
  if (ds.tokens.size() < window) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " has ", ds.tokens.size(), " tokens, fewer than one window of ",
                     ds.windowed ? "seq_len" : "seq_len+1", " = ", window));
  }
  return ds;
}

void DataLoader::plan(const DataConfig& cfg, MemoryPlan& plan) {
  // A rank whose data cannot be sized here stops at loading it, before it
  // allocates anything else; `zeroctl estimate` says it did not count it.
  const absl::StatusOr<int64_t> windows = dataset_windows(cfg);
  if (windows.ok()) plan.add("data order", Tier::kHost, Category::kWorkspace, order_bytes(*windows));
}

absl::StatusOr<DataLoader> DataLoader::create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank,
                                              int world_size, MemoryAccountant& acct, bool windowed) {
  ZEROD_ASSIGN_OR_RETURN(Buffer order, Buffer::allocate(order_bytes(num_windows(tokens->size(), seq_len, windowed)),
                                                        Category::kWorkspace, Tier::kHost, acct));
  return DataLoader(tokens, seq_len, seed, rank, world_size, std::move(order), windowed);
}

// Expects at least one window, which load_dataset checks.
DataLoader::DataLoader(const TokenStream* tokens, int seq_len, uint64_t seed, int rank, int world_size, Buffer order,
                       bool windowed)
    : tokens_(tokens),
      seq_len_(seq_len),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      windowed_(windowed),
      num_windows_(num_windows(tokens->size(), seq_len, windowed)),
      order_(std::move(order)),
      window_(seq_len + 1) {
  shuffle_epoch();
}

void DataLoader::shuffle_epoch() {
  int64_t* order = order_.host<int64_t>();
  std::iota(order, order + num_windows_, int64_t{0});
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + state_.epoch);
  shuffle(order, static_cast<size_t>(num_windows_), rng);
}

int64_t DataLoader::read_window(int64_t w, int32_t* inputs, int32_t* targets) {
  if (!windowed_) {
    tokens_->read(w * seq_len_, seq_len_ + 1, window_.data());
    for (int t = 0; t < seq_len_; ++t) {
      // Ids are below vocab_size (load_dataset), an int.
      inputs[t] = static_cast<int32_t>(window_[t]);
      targets[t] = static_cast<int32_t>(window_[t + 1]);
    }
    return seq_len_;
  }
  tokens_->read(w * seq_len_, seq_len_, window_.data());
  window_[seq_len_] = kNotTarget;  // the next window's first id, never a target
  int64_t counted = 0;
  for (int t = 0; t < seq_len_; ++t) {
    const uint32_t next = window_[t + 1];
    const bool target = (next & kNotTarget) == 0;
    counted += target;
    if (inputs == nullptr) continue;
    inputs[t] = static_cast<int32_t>(window_[t] & ~kNotTarget);
    targets[t] = target ? static_cast<int32_t>(next) : -1;
  }
  return counted;
}

int64_t DataLoader::next_batch(int B, int32_t* inputs, int32_t* targets) {
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
    const int64_t c = read_window(w, mine ? inputs + b * seq_len_ : nullptr, mine ? targets + b * seq_len_ : nullptr);
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
