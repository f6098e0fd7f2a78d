#include "runtime/tokenize/sentencepiece_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "runtime/tokenize/sentencepiece_model.h"

namespace zerod {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string source, TokenizerConfig config)
      : Tokenizer(std::move(source), std::move(config)) {}

  absl::Status load() {
    std::string error;
    if (!sp_.load(source(), &error))
      return absl::InvalidArgumentError(
          absl::StrCat(source(), ": not a SentencePiece model (sentencepiece: ", error, ")"));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<uint32_t>> encode(std::string_view text, bool add_special) const override {
    const std::vector<int> pieces = sp_.encode(text);
    std::vector<uint32_t> ids;
    ids.reserve(pieces.size() + 2);
    if (add_special && config().add_bos_token.value_or(true) && sp_.bos_id() >= 0) ids.push_back(sp_.bos_id());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (add_special && config().add_eos_token.value_or(false) && sp_.eos_id() >= 0) ids.push_back(sp_.eos_id());
    return ids;
  }
  int64_t vocab_size() const override { return sp_.size(); }
  std::optional<uint32_t> token_id(std::string_view token) const override {
    const int id = sp_.id_of(token);
    if (id < 0) return std::nullopt;
    return uint32_t(id);
  }

 private:
  SentencePieceModel sp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path,
                                                                        TokenizerConfig config) {
  auto tok = std::make_unique<SentencePieceTokenizer>(path, std::move(config));
  if (auto s = tok->load(); !s.ok()) return s;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace zerod
