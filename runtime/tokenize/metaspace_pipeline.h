// What a SentencePiece-style BPE in tokenizer.json (byte fallback: Llama 2,
// Mistral, Gemma) does to a segment of text before its model: spaces become
// '▁', a '▁' may be prepended, and the text may be cut into words. It works
// on characters that keep the bytes of the original text they came from, so
// that each id's offsets are `tokenizers`' (an inserted or replaced
// character covers the character it stands at).
//
// transformers 5 reads such a file through its tokenizer class, which may
// rebuild these steps whatever the file says: LlamaTokenizer (Metaspace,
// prepending to the text's start, or with `legacy` to every segment, unless
// add_prefix_space is false) and GemmaTokenizer (spaces replaced, nothing
// prepended). Another class takes the file's own normalizer (Prepend,
// Replace of a character) and pre-tokenizer (Metaspace, Split on a
// character).
#pragma once

#include <unicode/umachine.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

struct TokenizerConfig;

// A character of the normalized text and the bytes [begin, end) of the
// original segment it stands for.
struct OffsetChar {
  UChar32 c;
  size_t begin, end;
};
using Word = std::vector<OffsetChar>;

class MetaspacePipeline {
 public:
  // The class's steps where `config` names one that rebuilds them, else the
  // file's `normalizer` and `pre_tokenizer`; an error names what is not
  // read (the caller prefixes the file).
  absl::Status read(const TokenizerConfig& config, const nlohmann::json& normalizer,
                    const nlohmann::json& pre_tokenizer);
  // Whether the class rebuilt the steps, and the model with them (whose
  // BPE then looks up no whole words: ignore_merges false).
  bool rebuilt() const { return rebuilt_; }
  // Whether the text is changed before added tokens written in it are
  // matched (which the caller must then refuse for normalized tokens).
  bool normalizes() const { return !normalizers_.empty(); }

  // `segment` (valid UTF-8, between added tokens) as the model's words;
  // `text_start`: the segment begins the whole text.
  std::vector<Word> words(std::string_view segment, bool text_start) const;

 private:
  struct Step {
    bool prepend;  // else a replacement of `from`
    UChar32 from;
    std::u32string to;
  };
  enum class Prepend { kAlways, kFirst, kNever };
  absl::Status read_normalizer(const nlohmann::json& n);
  absl::Status read_pre_tokenizer(const nlohmann::json& p);

  bool rebuilt_ = false;
  std::vector<Step> normalizers_;
  bool metaspace_ = false;
  UChar32 replacement_ = 0x2581;  // '▁'
  Prepend prepend_ = Prepend::kNever;
  bool split_metaspace_ = false;    // words start at each replacement
  bool split_after_space_ = false;  // words end after each ' ' (Gemma's Split)
};

}  // namespace zerod
