// The job config's data section: what kind of data, where, and the window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zerod {

enum class DataKind { kSynthetic, kText, kTokens };

// data.eval: the held-out set a run evaluates (Trainer::evaluate), a
// dataset of its own (`path`, of `kind`, cut into data.seq_len windows as
// the training data is) or a `fraction` of the training data's windows,
// drawn by data.seed and never trained on.
struct EvalDataConfig {
  DataKind kind = DataKind::kTokens;
  std::string path;
  double fraction = 0;  // 0: path
};

// data.sources: datasets mixed in one run, each a file or glob of
// data.kind; each window of a batch is drawn from a source with
// probability its weight over the weights' sum, by data.seed.
struct DataSource {
  std::string path;
  double weight = 0;
};

struct DataConfig {
  DataKind kind = DataKind::kSynthetic;
  std::string path;  // file or glob; unused for synthetic and with sources
  int seq_len = 64;
  uint64_t seed = 1;
  std::optional<EvalDataConfig> eval;
  std::vector<DataSource> sources;  // empty: `path` alone
};

}  // namespace zerod
