// Training data: llm.c token shards (16- or 32-bit ids), plain text as byte
// tokens, and the built-in synthetic arithmetic task. Everything becomes one
// stream of token ids (files mapped, not copied: token_stream.h) that the
// DataLoader cuts into windows.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/memory.h"
#include "runtime/core/memory_plan.h"
#include "runtime/core/status.h"
#include "runtime/data/token_stream.h"

namespace zerod {

enum class DataKind { kSynthetic, kText, kTokens };

struct DataConfig {
  DataKind kind = DataKind::kSynthetic;
  std::string path;  // file or glob; unused for synthetic
  int seq_len = 64;
  uint64_t seed = 1;
};

// llm.c shard: 256 little-endian int32 header (magic, version, token count,
// rest zero), then `count` little-endian ids: uint16 (GPT-2's vocabulary),
// or uint32 under llm.c's own magic and version for vocabularies past 65536
// ids (Llama 3's 128,256). Shards of both kinds may make one dataset.
inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int32_t kTokenShard32Magic = 20240801;
inline constexpr int32_t kTokenShard32Version = 7;
// zerod's windowed shard: instruction examples (zeroctl tokenize), each
// padded to one window of `window` ids, the seq_len they were laid out for,
// with their loss mask. The llm.c header with the id count in header[2] and
// the window in header[3], then uint32 ids, the top bit (kNotTarget) set on
// each id the loss does not count as a target. A window's first id is
// never a target, so windows neither share ids nor see another's.
inline constexpr int32_t kWindowShardMagic = 20261128;
inline constexpr int32_t kWindowShardVersion = 1;
inline constexpr uint32_t kNotTarget = 0x80000000u;
// A shard of any kind, its ids widened (a windowed shard's with their flag).
absl::StatusOr<std::vector<uint32_t>> read_token_shard(const std::string& path);
// Written aside and renamed into place: uint16 ids, or uint32 ones.
absl::Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
absl::Status write_token_shard32(const std::string& path, const std::vector<uint32_t>& tokens);
// `ids` must be a whole number of windows.
absl::Status write_window_shard(const std::string& path, const std::vector<uint32_t>& ids, int window);

// Files matching `pattern` (a path or a glob), sorted; an error names the
// pattern when nothing matches.
absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& pattern);

// The synthetic task: lines "a+b=c\n" with operands in [0, max_operand],
// zero-padded to fixed widths ("07+25=032\n"), as byte tokens. The stream is
// cut into segments of seq_len tokens that each begin with "\n" and hold
// whole lines (the rest is "\n" padding), so every training window starts at
// a line and each digit has a fixed position, as in the held-out prompts
// ("\n07+25=" at position 0). A seeded tenth of the operand pairs is held
// out: it never appears in the training stream and scores the model.
struct SyntheticTask {
  std::vector<uint16_t> train_tokens;
  std::vector<std::pair<std::string, std::string>> heldout;  // ("07+25=", "032")
};
SyntheticTask make_synthetic_task(uint64_t seed, int seq_len, int max_operand = 99, int train_lines = 100000,
                                  int heldout_prompts = 200);
// The length of make_synthetic_task's training stream, without making it.
int64_t synthetic_task_tokens(int seq_len, int max_operand = 99, int train_lines = 100000);

// Loads the whole token stream for `cfg`; tokens must be < vocab_size.
// Errors name the file and what was wrong (missing, truncated, bad header,
// token out of range, too few tokens for one window of seq_len + 1;
// windowed shards mixed with others or laid out for another seq_len).
struct Dataset {
  TokenStream tokens;
  std::vector<std::pair<std::string, std::string>> heldout;  // synthetic only
  bool windowed = false;  // windowed shards: one example a window, a loss mask
};
absl::StatusOr<Dataset> load_dataset(const DataConfig& cfg, int vocab_size);
// The ids load_dataset would read, and the windows a DataLoader would cut
// them into, from the files' sizes and headers alone; errors as
// load_dataset's for a missing or malformed file.
absl::StatusOr<int64_t> dataset_tokens(const DataConfig& cfg);
absl::StatusOr<int64_t> dataset_windows(const DataConfig& cfg);

// Cuts the stream into windows of seq_len + 1 tokens (input and shifted
// target), each starting where the last one's targets end, and walks them in
// an order shuffled by seed and epoch. Rank r of world w takes windows
// [pos + r*B, pos + (r+1)*B) of each global batch of w*B windows, so the
// union over ranks is the single-process batch. A windowed dataset's
// windows are its examples, seq_len ids each; a target the mask leaves out
// (and a window's last) is -1, which the loss skips.
class DataLoader {
 public:
  // The window order is `acct`'s (fails past its host limit).
  static absl::StatusOr<DataLoader> create(const TokenStream* tokens, int seq_len, uint64_t seed, int rank = 0,
                                           int world_size = 1, MemoryAccountant& acct = MemoryAccountant::global(),
                                           bool windowed = false);
  // What create() allocates for `cfg`'s data, when it can be read here.
  static void plan(const DataConfig& cfg, MemoryPlan& plan);
  static uint64_t order_bytes(int64_t windows) { return static_cast<uint64_t>(windows) * sizeof(int64_t); }
  static int64_t num_windows(int64_t tokens, int seq_len, bool windowed) {
    return windowed ? tokens / seq_len : tokens == 0 ? 0 : (tokens - 1) / seq_len;
  }

  // Fills inputs/targets (B*seq_len each) with this rank's next micro-batch
  // and returns the targets (not -1) of all ranks' windows of that batch.
  int64_t next_batch(int B, int32_t* inputs, int32_t* targets);
  bool windowed() const { return windowed_; }

  struct State {
    uint64_t epoch = 0;
    uint64_t position = 0;  // windows consumed in this epoch, all ranks together
  };
  State state() const { return state_; }
  void set_state(const State& s);
  int64_t num_windows() const { return num_windows_; }

 private:
  DataLoader(const TokenStream* tokens, int seq_len, uint64_t seed, int rank, int world_size, Buffer order,
             bool windowed);
  void shuffle_epoch();
  // Window w's ids into window_ and its inputs and targets (a windowed
  // one's only when inputs is not null); returns its targets.
  int64_t read_window(int64_t w, int32_t* inputs, int32_t* targets);

  const TokenStream* tokens_;
  int seq_len_;
  uint64_t seed_;
  int rank_, world_size_;
  bool windowed_;
  int64_t num_windows_;
  Buffer order_;  // num_windows_ int64 window indices
  State state_;
  std::vector<uint32_t> window_;  // one window's ids as read
};

}  // namespace zerod
