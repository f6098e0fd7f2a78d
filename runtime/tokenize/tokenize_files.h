// What `zeroctl tokenize` makes of its inputs: text and JSONL turned into
// the token files training reads (dataset.h).
//  - A text file (any name but *.jsonl) is one document.
//  - A JSONL file holds a JSON object a line (blank lines skipped):
//    {"text": ...} is a document; {"prompt": ..., "response": ...} or
//    {"messages": [{"role": ..., "content": ...}, ...]} an instruction
//    example (instruction_data.h). One output holds one of the two kinds.
// Documents are encoded with the tokenizer's special tokens (its BOS),
// optionally followed by its EOS, and follow each other in one stream:
// an llm.c shard of 16-bit ids when the vocabulary fits, else of 32-bit.
// Examples are laid out one a window of seq_len ids, padded with the EOS,
// in a windowed shard whose mask leaves out all but the responses. With
// `pack`, examples, or documents, are packed whole into windows of seq_len
// ids instead (pack_windows.h), in a packed windowed shard (token_shard.h)
// whose flags mark where each starts, so that the model can keep attention
// and positions within each; a document longer than the window is cut into
// pieces of the window, each a document of its own; an example never is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

struct TokenizeOptions {
  int seq_len = 0;          // examples' window; needed for instruction data and `pack`
  bool append_eos = false;  // after each document
  bool pack = false;        // several documents or examples a window
};

struct Tokenized {
  std::vector<uint32_t> ids;  // a windowed shard's with their kNotTarget (and kDocStart) flags
  int window = 0;             // 0: a stream of documents
  bool packed = false;
  int64_t documents = 0, examples = 0;
  int64_t targets = 0;  // ids the loss counts as targets
  int64_t windows = 0;  // of a windowed shard
  double fill = 0;      // of a windowed shard: the ids not padding, of all
};

// Errors name the file and, in JSONL, the line (and the key) that is wrong.
absl::StatusOr<Tokenized> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs,
                                         const TokenizeOptions& options);

// Writes `t` to `path` (aside, then renamed): a windowed shard (packed or
// not), or an llm.c shard whose id width fits the tokenizer's vocabulary.
absl::Status write_tokenized(const std::string& path, const Tokenized& t, int64_t vocab_size);

}  // namespace zerod
