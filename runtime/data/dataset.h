// Training data assembled: llm.c token shards (16- or 32-bit ids), zerod's
// windowed shards, plain text as byte tokens, or the built-in synthetic
// task, become one stream of token ids (files mapped, not copied:
// token_stream.h) that the DataLoader (data_loader.h) cuts into windows.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/data/data_config.h"
#include "runtime/data/token_stream.h"

namespace zerod {

// Files matching `pattern` (a path or a glob), sorted; an error names the
// pattern, as the config's `key`, when nothing matches.
absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& pattern,
                                                          const std::string& key = "data.path");

// A source of data.sources: its ids' range of the stream.
struct SourceRange {
  int64_t begin = 0, tokens = 0;
};

// A dataset as training reads it: one stream of ids.
struct Dataset {
  TokenStream tokens;
  std::vector<SourceRange> sources;                          // data.sources', in order; empty without
  std::vector<std::pair<std::string, std::string>> heldout;  // synthetic only
  bool windowed = false;                                     // windowed shards: one example a window, a loss mask
  bool packed = false;                                       // packed windowed shards: documents in each window
};

// Loads the whole token stream for `cfg`; tokens must be < vocab_size.
// Errors name the file and what was wrong (missing, truncated, bad header,
// token out of range, too few tokens for one window of seq_len + 1;
// windowed shards mixed with others, packed ones with one-example-a-window
// ones, or laid out for another seq_len; a packed shard's boundary table
// damaged: a window not starting a document, or its flags not the count
// its header declares).
// `key`: the config's name of cfg.path in errors (data.eval.path for a
// held-out set). data.sources follow each other in the stream, each a
// dataset of its own for the checks (a source with no window is refused,
// naming it); all must be of one kind.
absl::StatusOr<Dataset> load_dataset(const DataConfig& cfg, int vocab_size, const std::string& key = "data.path");
// The ids load_dataset would read, and the windows a DataLoader would cut
// them into (each source's, summed), from the files' sizes and headers
// alone; errors as load_dataset's for a missing or malformed file.
absl::StatusOr<int64_t> dataset_tokens(const DataConfig& cfg);
absl::StatusOr<int64_t> dataset_windows(const DataConfig& cfg);
// Whether load_dataset would read packed windowed shards (Dataset::packed),
// from the first file's header alone.
absl::StatusOr<bool> dataset_packed(const DataConfig& cfg);

}  // namespace zerod
