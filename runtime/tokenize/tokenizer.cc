#include "runtime/tokenize/tokenizer.h"

#include <unicode/utf8.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/tokenize/bpe_tokenizer.h"
#include "runtime/tokenize/sentencepiece_tokenizer.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A special token as transformers writes it: its text, or an AddedToken
// object holding it as "content"; null is none.
absl::StatusOr<std::string> token_text(const json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::string();
  const json& t = j[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is neither text nor a token object"));
}

}  // namespace

int64_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto n = static_cast<int64_t>(s.size());
  for (int64_t i = 0; i < n;) {
    const int64_t at = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return at;
  }
  return -1;
}

absl::StatusOr<std::string> read_input_file(const std::string& path) {
  std::optional<std::string> text = read_whole_file(path);
  if (!text) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  return *std::move(text);
}

absl::StatusOr<nlohmann::json> read_json_file(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const std::string text, read_input_file(path));
  return parse_strict_json(text, path);
}

absl::StatusOr<TokenizerConfig> read_tokenizer_config(const std::string& path) {
  TokenizerConfig c;
  const std::string jinja = (fs::path(path).parent_path() / "chat_template.jinja").string();
  if (fs::exists(jinja)) {
    ZEROD_ASSIGN_OR_RETURN(c.chat_template, read_input_file(jinja));
    c.chat_template_source = jinja;
  }
  if (!fs::exists(path)) return c;
  auto j = read_json_file(path);
  if (!j.ok()) return j.status();
  if (!j->is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto bos = token_text(*j, path, "bos_token");
  if (!bos.ok()) return bos.status();
  auto eos = token_text(*j, path, "eos_token");
  if (!eos.ok()) return eos.status();
  c.bos_token = *bos;
  c.eos_token = *eos;
  const std::pair<const char*, std::optional<bool>*> flags[] = {{"add_bos_token", &c.add_bos_token},
                                                                {"add_eos_token", &c.add_eos_token},
                                                                {"legacy", &c.legacy},
                                                                {"add_prefix_space", &c.add_prefix_space}};
  for (const auto& [key, flag] : flags) {
    if (!j->contains(key) || (*j)[key].is_null()) continue;
    if (!(*j)[key].is_boolean())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is not true or false"));
    *flag = (*j)[key].get<bool>();
  }
  if (j->contains("tokenizer_class")) {
    if (!(*j)["tokenizer_class"].is_string())
      return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer_class is not text"));
    c.tokenizer_class = (*j)["tokenizer_class"].get<std::string>();
  }
  // One template, or named ones of which "default" is the one applied.
  const json t = j->value("chat_template", json());
  if (!c.chat_template_source.empty()) return c;
  c.chat_template_source = path;
  if (t.is_string()) {
    c.chat_template = t.get<std::string>();
  } else if (t.is_array()) {
    for (const json& each : t)
      if (each.is_object() && each.value("name", "") == "default") c.chat_template = each.value("template", "");
  } else if (!t.is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template is neither text nor a list"));
  }
  return c;
}

absl::StatusOr<std::vector<Tokenizer::Piece>> Tokenizer::encode_pieces(std::string_view) const {
  return absl::UnimplementedError(absl::StrCat(source(),
                                               ": a SentencePiece model keeps no offsets of its ids, which a chat "
                                               "template's loss mask needs; give the model's tokenizer.json"));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    // transformers' choice too: tokenizer.json when there is one.
    file = (fs::path(path) / "tokenizer.json").string();
    if (!fs::exists(file, ec)) file = (fs::path(path) / "tokenizer.model").string();
    if (!fs::exists(file, ec))
      return absl::NotFoundError(absl::StrCat(path, ": holds neither tokenizer.json nor tokenizer.model"));
  } else if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
  }
  auto config = read_tokenizer_config((fs::path(file).parent_path() / "tokenizer_config.json").string());
  if (!config.ok()) return config.status();
  if (absl::EndsWith(file, ".json")) return load_bpe_tokenizer(file, *std::move(config));
  if (absl::EndsWith(file, ".model")) return load_sentencepiece_tokenizer(file, *std::move(config));
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": not a kind of tokenizer zerod reads (tokenizer.json or a SentencePiece .model)"));
}

}  // namespace zerod
