#include "runtime/tokenize/tokenizer.h"

#include <unicode/utf8.h>

#include <charconv>
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
// object holding it as "content"; null is none. `what` names it in errors.
absl::StatusOr<std::string> token_text(const json& t, const std::string& what) {
  if (t.is_null()) return std::string();
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
  return absl::InvalidArgumentError(absl::StrCat(what, " is neither text nor a token object"));
}

// `key`'s text into `out` where the object `j` gives it (null: not given).
absl::Status read_text(const json& j, const std::string& path, const char* key, std::string& out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_string()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is not text"));
  out = j[key].get<std::string>();
  return absl::OkStatus();
}

// The special tokens the config names: each named one, and the lists of
// others (extra_special_tokens may be a map of names to tokens).
absl::StatusOr<std::vector<std::string>> special_tokens(const json& j, const std::string& path) {
  std::vector<std::string> out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    ZEROD_ASSIGN_OR_RETURN(std::string text, token_text(j.value(key, json()), absl::StrCat(path, ": ", key)));
    if (!text.empty()) out.push_back(std::move(text));
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    const json list = j.value(key, json());
    if (list.is_null()) continue;
    if (!list.is_array() && !list.is_object())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is neither a list nor a map"));
    for (const auto& [name, each] : list.items()) {
      ZEROD_ASSIGN_OR_RETURN(std::string text, token_text(each, absl::StrCat(path, ": ", key, "[", name, "]")));
      if (!text.empty()) out.push_back(std::move(text));
    }
  }
  return out;
}

// added_tokens_decoder ({"id": {content, ...}}) as tokenizer.json's
// added_tokens list; null where the config has none.
absl::StatusOr<json> added_tokens(const json& j, const std::string& path) {
  const json decoder = j.value("added_tokens_decoder", json());
  if (decoder.is_null()) return json();
  if (!decoder.is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": added_tokens_decoder is not a map of ids to tokens"));
  json out = json::array();
  for (const auto& [key, token] : decoder.items()) {
    uint32_t id = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || !token.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": added_tokens_decoder['", key, "'] is not an id's token object"));
    json entry = token;
    entry["id"] = id;
    out.push_back(std::move(entry));
  }
  return out;
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
  const fs::path dir = fs::path(path).parent_path();
  const std::string jinja = (dir / "chat_template.jinja").string();
  if (fs::exists(jinja)) {
    ZEROD_ASSIGN_OR_RETURN(c.chat_template, read_input_file(jinja));
    c.chat_template_source = jinja;
  }
  if (const std::string model = (dir / "config.json").string(); fs::exists(model)) {
    ZEROD_ASSIGN_OR_RETURN(const json m, read_json_file(model));
    if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(model, ": not a JSON object"));
    ZEROD_RETURN_IF_ERROR(read_text(m, model, "model_type", c.model_type));
    ZEROD_RETURN_IF_ERROR(read_text(m, model, "tokenizer_class", c.tokenizer_class));
  }
  if (!fs::exists(path)) return c;
  auto j = read_json_file(path);
  if (!j.ok()) return j.status();
  if (!j->is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  ZEROD_ASSIGN_OR_RETURN(c.bos_token, token_text(j->value("bos_token", json()), path + ": bos_token"));
  ZEROD_ASSIGN_OR_RETURN(c.eos_token, token_text(j->value("eos_token", json()), path + ": eos_token"));
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
  ZEROD_RETURN_IF_ERROR(read_text(*j, path, "tokenizer_class", c.tokenizer_class));
  ZEROD_ASSIGN_OR_RETURN(c.special_tokens, special_tokens(*j, path));
  ZEROD_ASSIGN_OR_RETURN(c.added_tokens, added_tokens(*j, path));
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
