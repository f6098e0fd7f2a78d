// What a SentencePiece-style BPE in tokenizer.json (byte fallback: Llama 2,
// Mistral, Gemma) does to a segment of text before its model: spaces become
// '▁', a '▁' may be prepended, and the text may be cut into words. It works
// on characters that keep the bytes of the original text they came from, so
// that each id's offsets are `tokenizers`' (an inserted or replaced
// character stands at the character it was made from).
//
// The steps are those of the class transformers 5 reads the file through
// (transformers_class.h): LlamaTokenizer and GemmaTokenizer rebuild them
// whatever the file says (LlamaTokenizer: Metaspace, prepending to the
// text's start, with `legacy` to every segment, or with add_prefix_space
// false never; GemmaTokenizer: spaces replaced, nothing prepended); a
// backend takes the file's own normalizer (Prepend, Replace of a character)
// and pre-tokenizer (Metaspace, Split on a space); another class is refused.
#pragma once

#include <unicode/umachine.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

struct TokenizerConfig;

class MetaspacePipeline {
 public:
  // A character of the normalized text and the bytes [begin, end) of the
  // original segment it stands for (segments are under 2 GiB).
  struct Char {
    UChar32 c;
    uint32_t begin, end;
  };
  using Word = std::vector<Char>;

  // The steps of the class `config` leads to, or the file's `normalizer`
  // and `pre_tokenizer`. An error names what is not read (the caller
  // prefixes the file): a malformed step always, as transformers' parse of
  // the file does; one zerod does not compute only where it is used.
  absl::Status read(const TokenizerConfig& config, const nlohmann::json& normalizer,
                    const nlohmann::json& pre_tokenizer);
  // Whether a class rebuilt the steps, and the model with them (whose BPE
  // then looks up no whole words) and its added tokens (the config's).
  bool rebuilt() const { return rebuilt_; }
  // Whether the text is changed before added tokens written in it are
  // matched (which the caller must then refuse for normalized tokens).
  bool normalizes() const { return !normalizers_.empty(); }

  // `segment` (UTF-8, between added tokens; a byte that is not becomes
  // U+FFFD) as the model's words; `text_start`: it begins the whole text.
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
  bool split_metaspace_ = false;  // words start at each replacement
  // Words end after each ' ' (a Split; Gemma's, after its Replace has left
  // no space, cuts nothing).
  bool split_after_space_ = false;
};

}  // namespace zerod
