#include "runtime/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/synthetic_task.h"
#include "runtime/data/token_shard.h"

namespace zerod {
namespace {

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

// A packed shard's boundary table, ids [begin, begin + count) of `ids`:
// each window's first id starts a document, and the flagged ids are as
// many as its header declares (`f.doc_starts`).
absl::Status check_doc_starts(const TokenStream& ids, int64_t begin, const FileTokens& f, const std::string& path) {
  int64_t flagged = 0, bad_window = -1;
  ids.scan(begin, begin + f.count, [&](int64_t pos, const uint32_t* chunk, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const bool start = (chunk[i] & kDocStart) != 0;
      flagged += start;
      if (!start && (pos + i - begin) % f.window == 0) {
        bad_window = (pos + i - begin) / f.window;
        return false;
      }
    }
    return true;
  });
  if (bad_window >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(data_file_name(path), ": packed window ", bad_window,
                                                   " does not start a document (its first id lacks kDocStart)"));
  }
  if (flagged != f.doc_starts) {
    return absl::InvalidArgumentError(absl::StrCat(data_file_name(path), ": ", flagged,
                                                   " ids start a document, but the header's boundary table counts ",
                                                   f.doc_starts));
  }
  return absl::OkStatus();
}

// Refuses `f` (of `path`) in a dataset whose first file was `ds`'s kind
// and for a job of `seq_len`.
absl::Status check_same_kind(const Dataset& ds, const FileTokens& f, int seq_len, const std::string& path) {
  if ((f.window > 0) != ds.windowed) {
    return absl::InvalidArgumentError(
        absl::StrCat(data_file_name(path), ": a ", ds.windowed ? "plain token shard" : "windowed shard", " among ",
                     ds.windowed ? "windowed" : "plain", " ones; one dataset holds one kind"));
  }
  if (f.packed != ds.packed) {
    return absl::InvalidArgumentError(absl::StrCat(
        data_file_name(path), ": a ", ds.packed ? "one-example-a-window windowed shard" : "packed windowed shard",
        " among ", ds.packed ? "packed" : "one-example-a-window", " ones; one dataset holds one kind"));
  }
  if (ds.windowed && f.window != seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(data_file_name(path), ": its examples were laid out for seq_len ",
                                                   f.window, ", the job's data.seq_len is ", seq_len,
                                                   " (zeroctl tokenize --seq-len)"));
  }
  return absl::OkStatus();
}

// The patterns of cfg's data and their keys in messages: data.path, or
// each of data.sources.
std::vector<std::pair<std::string, std::string>> data_paths(const DataConfig& cfg, const std::string& key) {
  if (cfg.sources.empty()) return {{cfg.path, key}};
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < cfg.sources.size(); ++i)
    out.push_back({cfg.sources[i].path, absl::StrCat("data.sources[", i, "].path")});
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& pattern, const std::string& key) {
  if (pattern.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (!std::filesystem::exists(pattern, ec)) {
      return absl::NotFoundError(absl::StrCat(key, " '", pattern, "' does not exist"));
    }
    return std::vector<std::string>{pattern};
  }
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  if (rc != 0 && rc != GLOB_NOMATCH) {
    return absl::InternalError(
        absl::StrCat(key, " '", pattern, "': glob failed (", rc == GLOB_NOSPACE ? "out of memory" : "read error", ")"));
  }
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat(key, " '", pattern, "' matches no files"));
  }
  // glob sorts by locale collation; byte order is the same everywhere.
  std::sort(paths.begin(), paths.end());
  return paths;
}

namespace {

// The ids of `cfg`'s files (each source's) and the kind of shard they are.
struct DataSize {
  std::vector<int64_t> tokens;
  bool windowed = false, packed = false;
};
absl::StatusOr<DataSize> data_size(const DataConfig& cfg) {
  if (cfg.kind == DataKind::kSynthetic) return DataSize{{synthetic_task_tokens(cfg.seq_len)}};
  DataSize size;
  for (const auto& [pattern, key] : data_paths(cfg, "data.path")) {
    ZEROD_ASSIGN_OR_RETURN(const std::vector<std::string> paths, expand_data_path(pattern, key));
    size.tokens.push_back(0);
    for (const std::string& path : paths) {
      ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(cfg.kind, path));
      if (size.tokens.size() == 1 && size.tokens.back() == 0) {  // load_dataset refuses a mix
        size.windowed = f.window > 0;
        size.packed = f.packed;
      }
      size.tokens.back() += f.count;
    }
  }
  return size;
}

}  // namespace

absl::StatusOr<int64_t> dataset_tokens(const DataConfig& cfg) {
  ZEROD_ASSIGN_OR_RETURN(const DataSize size, data_size(cfg));
  int64_t tokens = 0;
  for (const int64_t t : size.tokens) tokens += t;
  return tokens;
}

absl::StatusOr<int64_t> dataset_windows(const DataConfig& cfg) {
  ZEROD_ASSIGN_OR_RETURN(const DataSize size, data_size(cfg));
  int64_t windows = 0;
  for (const int64_t t : size.tokens) windows += WindowReader::num_windows(t, cfg.seq_len, size.windowed);
  return windows;
}

absl::StatusOr<bool> dataset_packed(const DataConfig& cfg) {
  ZEROD_ASSIGN_OR_RETURN(const DataSize size, data_size(cfg));
  return size.packed;
}

absl::StatusOr<Dataset> load_dataset(const DataConfig& cfg, int vocab_size, const std::string& key) {
  if (cfg.seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("data.seq_len must be at least 1, got ", cfg.seq_len));
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
    source = cfg.sources.empty() ? absl::StrCat(key, " '", cfg.path, "'") : std::string("data.sources");
    if (cfg.kind == DataKind::kText && vocab_size < 256) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": text data is byte tokens 0..255, so it needs vocab_size >= 256, got ", vocab_size));
    }
    bool first = true;
    for (const auto& [pattern, pattern_key] : data_paths(cfg, key)) {
      ZEROD_ASSIGN_OR_RETURN(const std::vector<std::string> paths, expand_data_path(pattern, pattern_key));
      const int64_t source_begin = ds.tokens.size();
      for (const std::string& path : paths) {
        const int64_t begin = ds.tokens.size();
        ZEROD_ASSIGN_OR_RETURN(const FileTokens f, file_tokens(cfg.kind, path));
        if (first) {
          ds.windowed = f.window > 0;
          ds.packed = f.packed;
          first = false;
        }
        ZEROD_RETURN_IF_ERROR(check_same_kind(ds, f, cfg.seq_len, path));
        ZEROD_RETURN_IF_ERROR(ds.tokens.append_file(path, f.offset, f.count, f.width));
        // Text's ids are bytes, below any vocabulary it may have (checked above).
        if (cfg.kind == DataKind::kTokens) {
          // Only a packed shard may carry kDocStart; elsewhere it is an id past the vocabulary.
          const uint32_t flags = ds.packed ? kNotTarget | kDocStart : ds.windowed ? kNotTarget : 0;
          ZEROD_RETURN_IF_ERROR(check_vocab(ds.tokens, begin, vocab_size, data_file_name(path), flags));
        }
        if (ds.packed) ZEROD_RETURN_IF_ERROR(check_doc_starts(ds.tokens, begin, f, path));
      }
      if (cfg.sources.empty()) continue;
      const SourceRange range{source_begin, ds.tokens.size() - source_begin};
      ds.sources.push_back(range);
      if (WindowReader::num_windows(range.tokens, cfg.seq_len, ds.windowed) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(pattern_key, " '", pattern, "' has ", range.tokens, " tokens, fewer than one window of ",
                         ds.windowed ? "seq_len" : "seq_len+1", " = ", cfg.seq_len + (ds.windowed ? 0 : 1)));
      }
    }
  }
  const int64_t window = int64_t{cfg.seq_len} + (ds.windowed ? 0 : 1);
  if (ds.tokens.size() < window) {
    return absl::InvalidArgumentError(absl::StrCat(source, " has ", ds.tokens.size(),
                                                   " tokens, fewer than one window of ",
                                                   ds.windowed ? "seq_len" : "seq_len+1", " = ", window));
  }
  return ds;
}

}  // namespace zerod
