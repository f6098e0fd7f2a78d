// The job config's data section: what kind of data, where, and the window.
#pragma once

#include <cstdint>
#include <string>

namespace zerod {

enum class DataKind { kSynthetic, kText, kTokens };

struct DataConfig {
  DataKind kind = DataKind::kSynthetic;
  std::string path;  // file or glob; unused for synthetic
  int seq_len = 64;
  uint64_t seed = 1;
};

}  // namespace zerod
