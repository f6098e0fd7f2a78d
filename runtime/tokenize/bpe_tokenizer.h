// BPE as Hugging Face's tokenizer.json describes it, giving the ids and
// offsets transformers 5 gives, byte-level (Llama 3, Qwen2, GPT-2) or
// SentencePiece-style with byte fallback (Llama 2, Mistral, Gemma):
//  - added tokens written in the text become their ids, the longest leftmost
//    first, and split the text into segments: the file's (or, where a class
//    rebuilds a byte-fallback BPE, tokenizer_config.json's
//    added_tokens_decoder), and every special token the config names;
//  - byte-level: each segment is normalized (NFC or nothing), cut by the
//    pre-tokenizer's Split patterns and ByteLevel's own pattern when it uses
//    one, in ICU's regex standing in for Oniguruma's (a backtracking matcher
//    too, whose \s is the same White_Space set: \v, U+0085 and the
//    separators); each piece's bytes become the 256 printable characters
//    GPT-2 maps them to;
//  - byte fallback: each segment takes metaspace_pipeline.h's steps (spaces
//    to '▁', a '▁' prepended), the class's (transformers_class.h) or the
//    file's; each character is its id, or its bytes' <0x..> ids where the
//    vocabulary lacks it;
//  - with ignore_merges (byte-level only) a piece the vocabulary holds
//    whole is one id, else its symbols merge pair by pair, the lowest-ranked
//    pair first and the leftmost of equals, as tokenizers' BPE does;
//  - the post-processor's template puts its special tokens around the text
//    (tokenizer_config.json's add_bos_token does not, as in transformers 5).
// What else tokenizer.json can say (another model, normalizer or
// pre-tokenizer where the file's are used, dropout, stripping added tokens)
// is refused by name when the file is read.
#pragma once

#include <memory>
#include <string>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

absl::StatusOr<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::string& path, TokenizerConfig config);

}  // namespace zerod
