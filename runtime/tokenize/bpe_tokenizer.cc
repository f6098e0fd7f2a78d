#include "runtime/tokenize/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/tokenize/metaspace_pipeline.h"

namespace zerod {
namespace {

using nlohmann::json;

// ICU's steps (about a millisecond each) a split may take on one piece.
constexpr int32_t kMatchTimeLimit = 2000;

// Ids are below 2^31: a windowed shard keeps its mask in the top bit.
bool is_id(const json& id) { return id.is_number_unsigned() && id.get<uint64_t>() < (uint64_t{1} << 31); }

// ByteLevel's own split pattern (GPT-2's), used when it says use_regex.
constexpr char kByteLevelPattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's map of bytes to printable characters, as UTF-8: the printable
// Latin-1 bytes stand for themselves, the others for U+0100 on, in order.
std::array<std::string, 256> byte_chars() {
  std::array<std::string, 256> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const UChar32 cp = printable ? b : next++;
    icu::UnicodeString(cp).toUTF8String(out[b]);
  }
  return out;
}

// Added tokens written in text, matched leftmost, longest first at a place.
class AddedTokens {
 public:
  void add(std::string content, uint32_t id) {
    by_first_[static_cast<unsigned char>(content[0])].push_back({std::move(content), id});
  }
  void finish() {
    for (auto& [first, list] : by_first_)
      std::stable_sort(list.begin(), list.end(),
                       [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  }
  // Calls text(segment) and token(id, its text) in order over `s`.
  template <typename Text, typename Token>
  void split(std::string_view s, Text&& text, Token&& token) const {
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      auto it = by_first_.find(static_cast<unsigned char>(s[i]));
      if (it == by_first_.end()) continue;
      for (const auto& [content, id] : it->second) {
        if (s.compare(i, content.size(), content) != 0) continue;
        if (i > start) text(s.substr(start, i - start));
        token(id, s.substr(i, content.size()));
        start = i + content.size();
        i = start - 1;
        break;
      }
    }
    if (start < s.size()) text(s.substr(start));
  }

 private:
  absl::flat_hash_map<unsigned char, std::vector<std::pair<std::string, uint32_t>>> by_first_;
};

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(std::string source, TokenizerConfig config) : Tokenizer(std::move(source), std::move(config)) {}

  absl::Status read(const json& j);

  absl::StatusOr<std::vector<uint32_t>> encode(std::string_view text, bool add_special) const override {
    std::vector<uint32_t> ids;
    if (add_special) ids = prefix_;
    ZEROD_RETURN_IF_ERROR(encode_text(text, ids, nullptr));
    if (add_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }
  absl::StatusOr<std::vector<Piece>> encode_pieces(std::string_view text) const override {
    std::vector<uint32_t> ids;
    std::vector<Piece> pieces;
    ZEROD_RETURN_IF_ERROR(encode_text(text, ids, &pieces));
    return pieces;
  }
  bool is_added(uint32_t id) const override { return added_id_set_.contains(id); }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<uint32_t> token_id(std::string_view token) const override {
    const absl::string_view key(token.data(), token.size());  // Debian's absl has a string_view of its own
    if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
    if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
    return std::nullopt;
  }

 private:
  struct Merge {
    uint32_t rank, id;
  };
  // An id and the bytes of the segment it stands for.
  struct Symbol {
    uint32_t id;
    size_t begin, end;
  };
  absl::Status error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(source(), ": ", what));
  }
  absl::Status read_model(const json& m);
  absl::Status read_normalizer(const json& n);
  absl::Status read_pre_tokenizer(const json& p);
  absl::Status read_post_processor(const json& p);
  // `a`: tokenizer.json's added_tokens, or the config's (`where` says which).
  absl::Status read_added_tokens(const json& a, const char* where);
  struct Split {
    std::string source;
    std::unique_ptr<icu::RegexPattern> pattern;
  };
  absl::StatusOr<Split> compile(const std::string& pattern) const;

  // The ids of `text`, and where `pieces` is given each id's bytes of it.
  absl::Status encode_text(std::string_view text, std::vector<uint32_t>& ids, std::vector<Piece>* pieces) const;
  // Appends the segment's ids and, where `spans` is given, each one's bytes
  // of it; `text_start`: the segment begins the text.
  absl::Status encode_segment(std::string_view segment, bool text_start, std::vector<uint32_t>& ids,
                              std::vector<std::pair<size_t, size_t>>* spans) const;
  void normalized_to_original(std::string_view segment, std::vector<std::pair<size_t, size_t>>& spans) const;
  absl::Status split_pieces(const Split& split, std::vector<icu::UnicodeString>& pieces) const;
  void encode_piece(const std::string& bytes, std::vector<uint32_t>& ids,
                    std::vector<std::pair<size_t, size_t>>* spans) const;
  // A SentencePiece-style word: each character its id, or its bytes' ids
  // where the vocabulary lacks it (byte fallback), then merged.
  void encode_word(const MetaspacePipeline::Word& word, std::vector<uint32_t>& ids,
                   std::vector<std::pair<size_t, size_t>>* spans) const;
  // Merges `symbols` pair by pair, the lowest-ranked pair first and the
  // leftmost of equals, as tokenizers' BPE does, and appends their ids and
  // spans.
  void merge(std::vector<Symbol>& symbols, std::vector<uint32_t>& ids,
             std::vector<std::pair<size_t, size_t>>* spans) const;

  absl::flat_hash_map<std::string, uint32_t> vocab_;      // the model's, which merges and lookups use
  absl::flat_hash_map<std::string, uint32_t> added_ids_;  // added tokens by their text
  absl::flat_hash_set<uint32_t> added_id_set_;
  int64_t vocab_size_ = 0;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id << 32 | right id)
  bool ignore_merges_ = false;
  // SentencePiece-style: bytes are <0x..> tokens, met only where a
  // character is not in the vocabulary, and text takes `metaspace_`'s steps.
  bool byte_fallback_ = false;
  MetaspacePipeline metaspace_;
  std::array<uint32_t, 256> byte_ids_{};
  std::array<std::string, 256> byte_chars_ = byte_chars();
  const icu::Normalizer2* nfc_ = nullptr;
  std::vector<Split> splits_;  // in order, then ByteLevel's when it has one
  AddedTokens added_;
  std::vector<uint32_t> prefix_, suffix_;  // the post-processor's
};

absl::StatusOr<BpeTokenizer::Split> BpeTokenizer::compile(const std::string& pattern) const {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  std::unique_ptr<icu::RegexPattern> p(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, where, status));
  if (U_FAILURE(status))
    return error(absl::StrCat("pre_tokenizer: the split pattern '", pattern, "' does not compile (",
                              u_errorName(status), " at offset ", where.offset, ")"));
  return Split{pattern, std::move(p)};
}

absl::Status BpeTokenizer::read(const json& j) {
  if (!j.is_object() || !j.contains("model")) return error("not a tokenizers file: no \"model\"");
  if (auto s = read_model(j["model"]); !s.ok()) return s;
  json added = j.value("added_tokens", json::array());
  const char* where = "added_tokens";
  if (byte_fallback_) {
    if (auto s = metaspace_.read(config(), j.value("normalizer", json()), j.value("pre_tokenizer", json())); !s.ok())
      return error(std::string(s.message()));
    if (metaspace_.rebuilt()) {
      // The class builds a BPE of the file's vocabulary and merges alone:
      // it looks up no whole words, and its added tokens are the config's.
      ignore_merges_ = false;
      if (!config().added_tokens.is_null()) {
        added = config().added_tokens;
        where = "tokenizer_config.json's added_tokens_decoder";
      }
    }
    if (ignore_merges_) return error("model.ignore_merges with byte fallback is not supported");
    if (metaspace_.normalizes())
      for (const json& t : added)
        if (t.value("normalized", false))
          return error(absl::StrCat(where, ": '", t.value("content", ""),
                                    "' is matched in the normalized text (normalized: true), which is not supported "
                                    "with byte fallback"));
  } else {
    if (auto s = read_normalizer(j.value("normalizer", json())); !s.ok()) return s;
    if (auto s = read_pre_tokenizer(j.value("pre_tokenizer", json())); !s.ok()) return s;
  }
  if (auto s = read_added_tokens(added, where); !s.ok()) return s;
  // The file's post-processor, whatever tokenizer_config.json's add_bos_token
  // says: transformers 5 keeps it so.
  return read_post_processor(j.value("post_processor", json()));
}

absl::Status BpeTokenizer::read_model(const json& m) {
  const std::string type = m.value("type", "");
  if (type != "BPE")
    return error(absl::StrCat("model.type '", type,
                              "' is not supported (BPE is; a SentencePiece model is read "
                              "from tokenizer.model)"));
  byte_fallback_ = m.value("byte_fallback", false);
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    return error("model.dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
      return error(absl::StrCat("model.", key, " is not supported"));
  ignore_merges_ = m.value("ignore_merges", false);
  if (!m.contains("vocab") || !m["vocab"].is_object()) return error("model.vocab is not an object");
  for (const auto& [token, id] : m["vocab"].items()) {
    if (!is_id(id)) return error(absl::StrCat("model.vocab['", token, "'] is not an id below 2^31"));
    const uint32_t v = id.get<uint32_t>();
    vocab_[token] = v;
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(v) + 1);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string token = byte_fallback_ ? absl::StrFormat("<0x%02X>", b) : byte_chars_[b];
    auto it = vocab_.find(token);
    if (it == vocab_.end())
      return error(
          absl::StrCat("model.vocab lacks the byte ", b, byte_fallback_ ? "'s token " : "'s character ", token));
    byte_ids_[b] = it->second;
  }
  const json merges = m.value("merges", json::array());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& e = merges[rank];
    std::string left, right;
    if (e.is_string() && e.get<std::string>().find(' ') != std::string::npos) {  // "a b"
      const std::string s = e.get<std::string>();
      left = s.substr(0, s.find(' '));
      right = s.substr(s.find(' ') + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      return error(absl::StrCat("model.merges[", rank, "] is neither 'a b' nor [a, b]"));
    }
    auto a = vocab_.find(left), b = vocab_.find(right), ab = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || ab == vocab_.end())
      return error(absl::StrCat("model.merges[", rank, "] names a token the vocabulary lacks"));
    // A pair listed twice takes its last rank, as tokenizers' map of merges does.
    merges_.insert_or_assign(uint64_t(a->second) << 32 | b->second, Merge{uint32_t(rank), ab->second});
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_added_tokens(const json& a, const char* where) {
  auto add = [&](const std::string& content, uint32_t id) {
    added_.add(content, id);
    added_ids_[content] = id;
    added_id_set_.insert(id);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t(id) + 1);
  };
  for (const json& t : a) {
    const std::string content = t.value("content", "");
    if (content.empty() || !t.contains("id") || !is_id(t["id"]))
      return error(absl::StrCat(where, ": an entry without content or an id below 2^31"));
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (t.value(key, false))
        return error(absl::StrCat(where, ": '", content, "' sets ", key, ", which is not supported"));
    add(content, t["id"].get<uint32_t>());
  }
  // transformers adds each special token the config names to the added
  // tokens, matched whole: the vocabulary's piece of it (one it lacks would
  // get an id past the vocabulary's, which no model has).
  for (const std::string& token : config().special_tokens) {
    if (added_ids_.contains(token)) continue;
    auto it = vocab_.find(token);
    if (it == vocab_.end())
      return error(
          absl::StrCat("tokenizer_config.json names the special token '", token, "', which the vocabulary lacks"));
    add(token, it->second);
  }
  added_.finish();
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_normalizer(const json& n) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& each : n.value("normalizers", json::array()))
      if (auto s = read_normalizer(each); !s.ok()) return s;
    return absl::OkStatus();
  }
  if (type != "NFC") return error(absl::StrCat("normalizer type '", type, "' is not supported (NFC is)"));
  UErrorCode status = U_ZERO_ERROR;
  nfc_ = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) return error(absl::StrCat("ICU's NFC: ", u_errorName(status)));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_pre_tokenizer(const json& p) {
  std::vector<json> steps;
  if (!p.is_null() && p.value("type", "") == "Sequence") {
    for (const json& each : p.value("pretokenizers", json::array())) steps.push_back(each);
  } else if (!p.is_null()) {
    steps.push_back(p);
  }
  if (steps.empty() || steps.back().value("type", "") != "ByteLevel")
    return error("pre_tokenizer: byte-level BPE ends in a ByteLevel pre-tokenizer; this file's does not");
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    const std::string type = s.value("type", "");
    if (type == "ByteLevel" && i + 1 == steps.size()) {
      if (s.value("add_prefix_space", false))
        return error("pre_tokenizer: ByteLevel's add_prefix_space is not supported");
      if (!s.value("use_regex", true)) continue;
      auto compiled = compile(kByteLevelPattern);
      if (!compiled.ok()) return compiled.status();
      splits_.push_back(std::move(*compiled));
    } else if (type == "Split") {
      if (s.value("behavior", "") != "Isolated" || s.value("invert", false))
        return error("pre_tokenizer: a Split other than Isolated, uninverted, is not supported");
      const json pattern = s.value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("Regex"))
        return error("pre_tokenizer: a Split's pattern other than a Regex is not supported");
      auto compiled = compile(pattern["Regex"].get<std::string>());
      if (!compiled.ok()) return compiled.status();
      splits_.push_back(std::move(*compiled));
    } else {
      return error(absl::StrCat("pre_tokenizer type '", type, "' is not supported (Split and ByteLevel are)"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::read_post_processor(const json& p) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& each : p.value("processors", json::array()))
      if (auto s = read_post_processor(each); !s.ok()) return s;
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type != "TemplateProcessing")
    return error(absl::StrCat("post_processor type '", type, "' is not supported (TemplateProcessing is)"));
  const json specials = p.value("special_tokens", json::object());
  bool after = false;
  for (const json& item : p.value("single", json::array())) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const std::string name = item.contains("SpecialToken") ? item["SpecialToken"].value("id", "") : "";
    if (!specials.contains(name)) return error(absl::StrCat("post_processor: the template names '", name, "'"));
    for (const json& id : specials[name].value("ids", json::array())) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(vocab_size_))
        return error(absl::StrCat("post_processor: '", name, "' has an id the vocabulary lacks"));
      (after ? suffix_ : prefix_).push_back(id.get<uint32_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::split_pieces(const Split& split, std::vector<icu::UnicodeString>& pieces) const {
  std::vector<icu::UnicodeString> out;
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(split.pattern->matcher(status));
  // A pattern that backtracks without end stops (a tokenizer's own patterns
  // are linear; this bounds a malformed file's), as does one that overflows
  // ICU's backtracking stack.
  m->setTimeLimit(kMatchTimeLimit, status);
  for (const icu::UnicodeString& piece : pieces) {
    m->reset(piece);
    int32_t at = 0;
    while (m->find(status) && U_SUCCESS(status)) {
      const int32_t start = m->start(status), end = m->end(status);
      // Copies (not temporary aliases): `pieces` goes once they are made.
      if (start > at) out.emplace_back(piece, at, start - at);
      if (end > start) out.emplace_back(piece, start, end - start);
      at = end;
    }
    if (U_FAILURE(status))
      return error(absl::StrCat("pre_tokenizer: the split pattern '", split.source, "' failed on the text (",
                                u_errorName(status), ")"));
    if (at < piece.length()) out.emplace_back(piece, at);
  }
  m.reset();  // it refers to the last piece, which goes now
  pieces = std::move(out);
  return absl::OkStatus();
}

absl::Status BpeTokenizer::encode_text(std::string_view text, std::vector<uint32_t>& ids,
                                       std::vector<Piece>* pieces) const {
  absl::Status status;
  std::vector<std::pair<size_t, size_t>> spans;
  added_.split(
      text,
      [&](std::string_view segment) {
        if (!status.ok()) return;
        const size_t first = ids.size();
        spans.clear();
        status = encode_segment(segment, segment.data() == text.data(), ids, pieces != nullptr ? &spans : nullptr);
        if (!status.ok() || pieces == nullptr) return;
        const auto at = size_t(segment.data() - text.data());
        for (size_t k = first; k < ids.size(); ++k)
          pieces->push_back({ids[k], at + spans[k - first].first, at + spans[k - first].second});
      },
      [&](uint32_t id, std::string_view token) {
        ids.push_back(id);
        const auto at = size_t(token.data() - text.data());
        if (pieces != nullptr) pieces->push_back({id, at, at + token.size()});
      });
  return status;
}

absl::Status BpeTokenizer::encode_segment(std::string_view segment, bool text_start, std::vector<uint32_t>& ids,
                                          std::vector<std::pair<size_t, size_t>>* spans) const {
  if (segment.size() > size_t(INT32_MAX))  // ICU's strings are indexed by int32_t
    return error(absl::StrCat("a text of ", segment.size(), " bytes is more than the 2 GiB it encodes at once"));
  if (byte_fallback_) {
    for (const MetaspacePipeline::Word& word : metaspace_.words(segment, text_start)) encode_word(word, ids, spans);
    return absl::OkStatus();
  }
  const icu::UnicodeString original =
      icu::UnicodeString::fromUTF8(icu::StringPiece(segment.data(), int32_t(segment.size())));
  icu::UnicodeString text = original;
  if (nfc_ != nullptr) {
    UErrorCode status = U_ZERO_ERROR;
    text = nfc_->normalize(text, status);
  }
  std::vector<icu::UnicodeString> pieces{text};
  for (const Split& split : splits_) ZEROD_RETURN_IF_ERROR(split_pieces(split, pieces));
  std::string bytes;
  size_t at = 0;  // in the normalized text
  for (const icu::UnicodeString& piece : pieces) {
    bytes.clear();
    piece.toUTF8String(bytes);
    const size_t first = spans != nullptr ? spans->size() : 0;
    encode_piece(bytes, ids, spans);
    if (spans != nullptr)
      for (size_t k = first; k < spans->size(); ++k) (*spans)[k] = {(*spans)[k].first + at, (*spans)[k].second + at};
    at += bytes.size();
  }
  if (spans != nullptr && text != original) normalized_to_original(segment, *spans);
  return absl::OkStatus();
}

// NFC changed the segment: each id's bytes of the normalized text widened
// to the original runs they fall in, a run reaching from one normalization
// boundary to the next (a character and its combining marks), as
// `tokenizers` widens an id's offsets to the characters it touches.
void BpeTokenizer::normalized_to_original(std::string_view segment,
                                          std::vector<std::pair<size_t, size_t>>& spans) const {
  struct Run {
    size_t normalized_end, begin, end;
  };
  std::vector<Run> runs;
  const auto* p = reinterpret_cast<const uint8_t*>(segment.data());
  const auto n = int32_t(segment.size());
  size_t normalized = 0;
  for (int32_t begin = 0; begin < n;) {
    int32_t i = begin;
    UChar32 c;
    U8_NEXT(p, i, n, c);  // the run's first character
    while (i < n) {
      int32_t j = i;
      U8_NEXT(p, j, n, c);
      if (nfc_->hasBoundaryBefore(c)) break;
      i = j;
    }
    UErrorCode status = U_ZERO_ERROR;
    std::string run;
    nfc_->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(segment.data() + begin, i - begin)), status)
        .toUTF8String(run);
    normalized += run.size();
    runs.push_back({normalized, size_t(begin), size_t(i)});
    begin = i;
  }
  // The run holding normalized byte `at`.
  auto run_of = [&](size_t at) {
    return *std::upper_bound(runs.begin(), runs.end(), at, [](size_t x, const Run& r) { return x < r.normalized_end; });
  };
  for (auto& [begin, end] : spans) {
    if (end == begin) continue;
    begin = run_of(begin).begin;
    end = run_of(end - 1).end;
  }
}

void BpeTokenizer::encode_piece(const std::string& bytes, std::vector<uint32_t>& ids,
                                std::vector<std::pair<size_t, size_t>>* spans) const {
  if (ignore_merges_) {
    std::string chars;
    for (unsigned char b : bytes) chars += byte_chars_[b];
    if (auto it = vocab_.find(chars); it != vocab_.end()) {
      ids.push_back(it->second);
      if (spans != nullptr) spans->push_back({0, bytes.size()});
      return;
    }
  }
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < bytes.size(); ++i)
    symbols.push_back({byte_ids_[static_cast<unsigned char>(bytes[i])], i, i + 1});
  merge(symbols, ids, spans);
}

void BpeTokenizer::encode_word(const MetaspacePipeline::Word& word, std::vector<uint32_t>& ids,
                               std::vector<std::pair<size_t, size_t>>* spans) const {
  std::vector<Symbol> symbols;
  std::string one;
  for (const MetaspacePipeline::Char& c : word) {
    one.clear();
    icu::UnicodeString(c.c).toUTF8String(one);
    if (auto it = vocab_.find(one); it != vocab_.end()) {
      symbols.push_back({it->second, c.begin, c.end});
    } else {  // each byte a token, covering the character, as tokenizers' offsets do
      for (unsigned char b : one) symbols.push_back({byte_ids_[b], c.begin, c.end});
    }
  }
  merge(symbols, ids, spans);
}

void BpeTokenizer::merge(std::vector<Symbol>& symbols, std::vector<uint32_t>& ids,
                         std::vector<std::pair<size_t, size_t>>* spans) const {
  // The symbols, linked; a merged-away one has id kGone.
  constexpr uint32_t kGone = UINT32_MAX;
  const int n = int(symbols.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // (rank, position, the id the pair would make): lowest rank, then leftmost.
  using Entry = std::tuple<uint32_t, int, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    auto it = merges_.find(uint64_t(symbols[i].id) << 32 | symbols[next[i]].id);
    if (it != merges_.end()) queue.emplace(it->second.rank, i, it->second.id);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, i, id] = queue.top();
    queue.pop();
    if (symbols[i].id == kGone || next[i] < 0) continue;
    // An entry made stale by an earlier merge no longer names this pair.
    auto it = merges_.find(uint64_t(symbols[i].id) << 32 | symbols[next[i]].id);
    if (it == merges_.end() || it->second.id != id) continue;
    const int j = next[i];
    symbols[i] = {id, symbols[i].begin, symbols[j].end};
    symbols[j].id = kGone;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (const Symbol& s : symbols) {
    if (s.id == kGone) continue;
    ids.push_back(s.id);
    if (spans != nullptr) spans->push_back({s.begin, s.end});
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_bpe_tokenizer(const std::string& path, TokenizerConfig config) {
  auto j = read_json_file(path);
  if (!j.ok()) return j.status();
  auto tok = std::make_unique<BpeTokenizer>(path, std::move(config));
  try {
    if (auto s = tok->read(*j); !s.ok()) return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace zerod
