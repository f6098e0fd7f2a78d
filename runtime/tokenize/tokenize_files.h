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
// in a windowed shard whose mask leaves out all but the responses; packing
// several examples into one window is not supported, since attention would
// cross from one example into the next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

struct TokenizeOptions {
  int seq_len = 0;          // examples' window; needed for instruction data
  bool append_eos = false;  // after each document
};

struct Tokenized {
  std::vector<uint32_t> ids;  // a windowed shard's with their kNotTarget flags
  int window = 0;             // 0: a stream of documents
  int64_t documents = 0, examples = 0;
  int64_t targets = 0;  // ids the loss counts as targets
};

// Errors name the file and, in JSONL, the line (and the key) that is wrong.
absl::StatusOr<Tokenized> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs,
                                         const TokenizeOptions& options);

// Writes `t` to `path` (aside, then renamed): a windowed shard, or an llm.c
// shard whose id width fits the tokenizer's vocabulary.
absl::Status write_tokenized(const std::string& path, const Tokenized& t, int64_t vocab_size);

}  // namespace zerod
