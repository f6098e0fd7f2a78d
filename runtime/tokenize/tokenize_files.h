// What `zeroctl tokenize` makes of its inputs: text, JSONL and JSON turned
// into the token files training reads (dataset.h).
//  - A text file (any name but *.jsonl and *.json) is one document.
//  - A JSONL file holds a JSON object a line (blank lines skipped); a JSON
//    file a list of them, or JSON lines (both as Hugging Face `datasets`
//    exports them). A record is a document, {"text"}, or an instruction
//    example (instruction_data.h) of one of the formats people bring:
//      {"prompt", "response"} or {"prompt", "completion"} (text),
//      {"messages": [{"role", "content"}, ...]} (OpenAI's),
//      {"prompt": [messages], "completion": [messages]} (a conversation),
//      {"conversations": [{"from", "value"}, ...]} (ShareGPT's: human,
//        gpt and system are user, assistant and system),
//      {"instruction", "input", "output"} (Alpaca's: the user says the
//        instruction, then the input after a blank line when it has one;
//        an optional "system" before them).
//    All but prompt and response text are conversations, rendered by the
//    tokenizer's chat template (chat_template.h), of which the trained
//    roles' turns are trained on. One output holds one of the two kinds.
// Documents are encoded with the tokenizer's special tokens (its BOS),
// optionally followed by its EOS, and follow each other in one stream:
// an llm.c shard of 16-bit ids when the vocabulary fits, else of 32-bit.
// Examples are laid out one a window of seq_len ids, padded with the EOS,
// in a windowed shard whose mask leaves out all but the responses. With
// `pack`, examples, or documents, are packed whole into windows of seq_len
// ids instead (pack_windows.h), in a packed windowed shard (token_shard.h)
// whose flags mark where each starts, so that the model can keep attention
// and positions within each; a document longer than the window is cut into
// pieces of the window, each a document of its own. An example longer
// than the window is refused, dropped or truncated (LongExamples).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tokenize/chat_template.h"
#include "runtime/tokenize/tokenizer.h"

namespace zerod {

// An example longer than its window: refused (naming it), left out, or
// truncated to the window keeping the start of its prompt (the ids before
// its first trained one) and the start of its response (the rest): the
// prompt keeps up to half the window, more where the response is shorter,
// and the response the rest. The task is stated at an instruction's start
// and a response is learnt from its start; a truncated response ends
// without its end token.
enum class LongExamples { kRefuse, kDrop, kTruncate };

struct TokenizeOptions {
  int seq_len = 0;          // examples' window; needed for instruction data and `pack`
  bool append_eos = false;  // after each document
  bool pack = false;        // several documents or examples a window
  LongExamples long_examples = LongExamples::kRefuse;
  std::string chat_template;  // a file; empty: the tokenizer's
  ChatTemplateOptions chat;
};

struct Tokenized {
  std::vector<uint32_t> ids;  // a windowed shard's with their kNotTarget (and kDocStart) flags
  int window = 0;             // 0: a stream of documents
  bool packed = false;
  int64_t documents = 0, examples = 0;
  int64_t dropped = 0, truncated = 0;  // examples longer than the window
  int64_t targets = 0;                 // ids the loss counts as targets
  int64_t windows = 0;                 // of a windowed shard
  double fill = 0;                     // of a windowed shard: the ids not padding, of all
};

// Errors name the file and, in JSONL, the line (and the key) that is wrong.
absl::StatusOr<Tokenized> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs,
                                         const TokenizeOptions& options);

// Writes `t` to `path` (aside, then renamed): a windowed shard (packed or
// not), or an llm.c shard whose id width fits the tokenizer's vocabulary.
absl::Status write_tokenized(const std::string& path, const Tokenized& t, int64_t vocab_size);

}  // namespace zerod
