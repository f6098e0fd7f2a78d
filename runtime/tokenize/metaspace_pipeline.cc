#include "runtime/tokenize/metaspace_pipeline.h"

#include <unicode/utf8.h>

#include "absl/strings/str_cat.h"
#include "runtime/tokenize/tokenizer.h"
#include "runtime/tokenize/transformers_class.h"

namespace zerod {
namespace {

using nlohmann::json;
using Char = MetaspacePipeline::Char;
using Word = MetaspacePipeline::Word;

constexpr UChar32 kSpace = ' ';

// `s`'s characters, each with its bytes; a byte that begins no character
// is U+FFFD, as ICU's conversions make it.
Word characters(std::string_view s) {
  Word out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto n = int64_t(s.size());
  for (int64_t i = 0; i < n;) {
    const int64_t begin = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    out.push_back({c < 0 ? 0xFFFD : c, uint32_t(begin), uint32_t(i)});
  }
  return out;
}

std::u32string code_points(std::string_view s) {
  std::u32string out;
  for (const Char& c : characters(s)) out += char32_t(c.c);
  return out;
}

// Each character equal to `from` becomes `to`'s, standing where it stood.
void replace(Word& w, UChar32 from, const std::u32string& to) {
  Word out;
  out.reserve(w.size());
  for (const Char& c : w) {
    if (c.c != from) {
      out.push_back(c);
      continue;
    }
    for (char32_t t : to) out.push_back({UChar32(t), c.begin, c.end});
  }
  w = std::move(out);
}

// `p` before a text that is not empty, standing where its first character does.
void prepend(Word& w, const std::u32string& p) {
  if (w.empty()) return;
  Word head;
  for (char32_t t : p) head.push_back({UChar32(t), w[0].begin, w[0].end});
  w.insert(w.begin(), head.begin(), head.end());
}

}  // namespace

absl::Status MetaspacePipeline::read(const TokenizerConfig& config, const json& normalizer, const json& pre_tokenizer) {
  absl::Status file = read_normalizer(normalizer);
  if (file.ok()) file = read_pre_tokenizer(pre_tokenizer);
  const std::string cls = transformers_class(config);
  if (cls.empty()) return file;
  if (cls != "LlamaTokenizer" && cls != "GemmaTokenizer")
    return absl::UnimplementedError(absl::StrCat(
        "transformers reads it through ",
        cls == "?" ? absl::StrCat("the class model_type '", config.model_type, "' is registered to") : cls,
        ", which rebuilds it in a way zerod does not follow (it follows LlamaTokenizer, GemmaTokenizer and the "
        "file's own steps)"));
  // The class replaces the file's steps, which transformers still parses.
  // The steps' readers say which kind an error is: InvalidArgument for a
  // malformed step (refused here too), Unimplemented for a well-formed one
  // zerod does not compute (no matter when the class replaces it).
  if (absl::IsInvalidArgument(file)) return file;
  *this = MetaspacePipeline();
  rebuilt_ = true;
  if (cls == "LlamaTokenizer") {
    metaspace_ = true;
    prepend_ = !config.add_prefix_space.value_or(true) ? Prepend::kNever
               : config.legacy.value_or(false)         ? Prepend::kAlways
                                                       : Prepend::kFirst;
  } else {
    normalizers_.push_back({false, kSpace, std::u32string(1, char32_t(replacement_))});
    split_after_space_ = true;
  }
  return absl::OkStatus();
}

absl::Status MetaspacePipeline::read_normalizer(const json& n) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& each : n.value("normalizers", json::array())) ZEROD_RETURN_IF_ERROR(read_normalizer(each));
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    normalizers_.push_back({true, 0, code_points(n.value("prepend", ""))});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    const json pattern = n.value("pattern", json());
    const std::u32string from =
        pattern.is_object() && pattern.contains("String") ? code_points(pattern["String"].get<std::string>()) : U"";
    if (from.size() != 1)
      return absl::UnimplementedError("normalizer: a Replace of other than one character is not supported");
    const std::u32string to = code_points(n.value("content", ""));
    // A character replaced by nothing would leave its bytes to no id.
    if (to.empty()) return absl::UnimplementedError("normalizer: a Replace by nothing is not supported");
    normalizers_.push_back({false, UChar32(from[0]), to});
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("normalizer type '", type, "' is not supported with byte fallback (Prepend and Replace are)"));
}

absl::Status MetaspacePipeline::read_pre_tokenizer(const json& p) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = p.value("type", "");
  if (type == "Metaspace") {
    if (!p.contains("replacement") || !p["replacement"].is_string())
      return absl::InvalidArgumentError("pre_tokenizer: Metaspace has no replacement");
    const std::u32string r = code_points(p["replacement"].get<std::string>());
    if (r.size() != 1) return absl::InvalidArgumentError("pre_tokenizer: Metaspace's replacement is not one character");
    metaspace_ = true;
    replacement_ = UChar32(r[0]);
    // A file older than prepend_scheme says add_prefix_space: true is "always".
    if (!p.contains("prepend_scheme") && !p.value("add_prefix_space", true))
      return absl::InvalidArgumentError("pre_tokenizer: Metaspace's add_prefix_space is false with no prepend_scheme");
    const std::string scheme = p.value("prepend_scheme", "always");
    if (scheme == "always") {
      prepend_ = Prepend::kAlways;
    } else if (scheme == "first") {
      prepend_ = Prepend::kFirst;
    } else if (scheme == "never") {
      prepend_ = Prepend::kNever;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("pre_tokenizer: Metaspace's prepend_scheme '", scheme, "'"));
    }
    split_metaspace_ = p.value("split", true);
    return absl::OkStatus();
  }
  if (type == "Split") {
    const json pattern = p.value("pattern", json());
    if (!pattern.is_object() || pattern.value("String", "") != " " || p.value("behavior", "") != "MergedWithPrevious" ||
        p.value("invert", false))
      return absl::UnimplementedError(
          "pre_tokenizer: with byte fallback, a Split other than on ' ', MergedWithPrevious, is not supported");
    split_after_space_ = true;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("pre_tokenizer type '", type, "' is not supported with byte fallback (Metaspace and Split are)"));
}

std::vector<Word> MetaspacePipeline::words(std::string_view segment, bool text_start) const {
  Word w = characters(segment);
  for (const Step& s : normalizers_) {
    if (s.prepend) {
      prepend(w, s.to);
    } else {
      replace(w, s.from, s.to);
    }
  }
  if (metaspace_) {
    replace(w, kSpace, std::u32string(1, char32_t(replacement_)));
    const bool first = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && text_start);
    if (first && !w.empty() && w[0].c != replacement_) prepend(w, std::u32string(1, char32_t(replacement_)));
  }
  std::vector<Word> out;
  if (!split_metaspace_ && !split_after_space_) {
    if (!w.empty()) out.push_back(std::move(w));
    return out;
  }
  Word word;
  for (const Char& c : w) {
    if (split_metaspace_ && c.c == replacement_ && !word.empty()) out.push_back(std::exchange(word, {}));
    word.push_back(c);
    if (split_after_space_ && c.c == kSpace) out.push_back(std::exchange(word, {}));
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

}  // namespace zerod
