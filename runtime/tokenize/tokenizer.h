// A model's own tokenizer, read from its Hugging Face files as transformers
// reads them, giving the ids transformers gives: tokenizer.json's BPE
// (bpe_tokenizer.h), byte-level (Llama 3, Qwen2, GPT-2) or with byte fallback
// (Llama 2, Mistral, Gemma), or, where a model has only that, its
// SentencePiece tokenizer.model (sentencepiece_tokenizer.h), giving
// sentencepiece's ids (which transformers' conversion of the model gives too
// but for runs of leading spaces).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

// What tokenizer_config.json (and config.json) say around the vocabulary:
// the special tokens by their text, and the chat template (empty when there
// is none).
struct TokenizerConfig {
  std::string bos_token, eos_token;
  std::string chat_template;
  std::string chat_template_source;                  // the file it was read from
  std::optional<bool> add_bos_token, add_eos_token;  // a SentencePiece model's
  // The hub's class (tokenizer_config.json's, else config.json's) and the
  // model's type, from which transformers_class.h tells the class
  // transformers reads a tokenizer.json through; what LlamaTokenizer takes.
  std::string tokenizer_class, model_type;
  std::optional<bool> legacy, add_prefix_space;
  // Every special token named (bos, eos, unk, sep, pad, cls, mask and the
  // additional or extra ones), which transformers matches whole in text.
  std::vector<std::string> special_tokens;
  // added_tokens_decoder as a list of tokenizer.json's added_tokens
  // entries (null when absent): the added tokens where a class rebuilds.
  nlohmann::json added_tokens;
};
// `path` beside the tokenizer, and config.json beside it; a missing file
// is an empty config. A chat_template.jinja beside it holds the template,
// as transformers saves it.
absl::StatusOr<TokenizerConfig> read_tokenizer_config(const std::string& path);

// The offset of the first byte of `s` that does not begin or continue a
// UTF-8 character, or -1.
int64_t first_invalid_utf8(std::string_view s);

// A tokenizer's file or an input, whole; NotFound naming it where it
// cannot be read.
absl::StatusOr<std::string> read_input_file(const std::string& path);
// The same, parsed as JSON (parse_strict_json's errors).
absl::StatusOr<nlohmann::json> read_json_file(const std::string& path);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // `path`: a model directory (its tokenizer.json when it has one, else its
  // tokenizer.model; tokenizer_config.json beside either) or one of those
  // files. Errors name the file and what in it zerod does not read.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& path);

  // transformers' encode(text, add_special_tokens=add_special) of valid
  // UTF-8 text: the tokenizer's BOS/EOS around the text when add_special.
  // Fails only where the tokenizer's own split pattern does on this text
  // (ICU's regex past its time or backtracking limits), naming the pattern.
  virtual absl::StatusOr<std::vector<uint32_t>> encode(std::string_view text, bool add_special) const = 0;
  // An id and the bytes of the text it stands for, [begin, end): the
  // offsets `tokenizers` gives, in bytes rather than characters (so an id
  // holding part of a character covers that part; one of what NFC merged
  // covers all the characters it came from).
  struct Piece {
    uint32_t id;
    size_t begin, end;
  };
  // encode(text, false)'s ids with their offsets; Unimplemented where the
  // tokenizer keeps none (a SentencePiece model).
  virtual absl::StatusOr<std::vector<Piece>> encode_pieces(std::string_view text) const;
  // Whether `id` is an added token (special or not), matched whole in a
  // text before the model splits the rest.
  virtual bool is_added(uint32_t /*id*/) const { return false; }
  // Every id is below this.
  virtual int64_t vocab_size() const = 0;
  // The id of a whole token by its text ("<|eot_id|>", "</s>"), if any.
  virtual std::optional<uint32_t> token_id(std::string_view token) const = 0;

  const TokenizerConfig& config() const { return config_; }
  // The file the vocabulary was read from, for messages.
  const std::string& source() const { return source_; }
  // The config's BOS and EOS ids, when it names tokens the vocabulary has.
  std::optional<uint32_t> bos() const { return token_id(config_.bos_token); }
  std::optional<uint32_t> eos() const { return token_id(config_.eos_token); }

 protected:
  Tokenizer(std::string source, TokenizerConfig config) : source_(std::move(source)), config_(std::move(config)) {}

 private:
  std::string source_;
  TokenizerConfig config_;
};

}  // namespace zerod
