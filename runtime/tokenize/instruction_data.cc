#include "runtime/tokenize/instruction_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace zerod {
namespace {

struct Part {
  std::string text;
  bool trained;
};

// The ids of the parts' text, each marked as its part is: a part's ids are
// those past the longest run its prefix's own encoding shares with the
// whole's, so a token that straddles two parts goes with the later one.
// Only where the mark changes is a prefix encoded.
absl::StatusOr<InstructionExample> encode_parts(const Tokenizer& tok, const std::vector<Part>& parts,
                                                bool add_special) {
  std::string text;
  for (const Part& p : parts) text += p.text;
  InstructionExample e;
  ZEROD_ASSIGN_OR_RETURN(e.ids, tok.encode(text, add_special));
  e.trained.assign(e.ids.size(), false);
  std::string prefix;
  size_t begin = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    prefix += parts[i].text;
    if (i + 1 < parts.size() && parts[i + 1].trained == parts[i].trained) continue;  // one run with the next
    size_t end = e.ids.size();
    if (i + 1 < parts.size()) {
      ZEROD_ASSIGN_OR_RETURN(const std::vector<uint32_t> head, tok.encode(prefix, add_special));
      end = std::mismatch(head.begin(), head.end(), e.ids.begin(), e.ids.end()).first - head.begin();
    }
    for (size_t k = begin; k < std::max(begin, end); ++k) e.trained[k] = parts[i].trained;
    begin = std::max(begin, end);
  }
  return e;
}

}  // namespace

absl::StatusOr<InstructionExample> prompt_response_example(const Tokenizer& tok, std::string_view prompt,
                                                           std::string_view response) {
  const std::optional<uint32_t> eos = tok.eos();
  if (!eos)
    return absl::InvalidArgumentError(absl::StrCat(
        tok.source(), ": its tokenizer_config.json names no eos_token the vocabulary has, to end a response"));
  const std::vector<Part> parts = {{std::string(prompt), false}, {std::string(response), true}};
  ZEROD_ASSIGN_OR_RETURN(InstructionExample e, encode_parts(tok, parts, true));
  if (e.ids.empty() || e.ids.back() != *eos) {  // unless the tokenizer's special tokens end in it
    e.ids.push_back(*eos);
    e.trained.push_back(true);
  }
  return e;
}

absl::StatusOr<InstructionExample> chat_example(const Tokenizer& tok, ChatTemplate& chat,
                                                const nlohmann::json& messages) {
  const std::vector<std::string>& roles = chat.options().trained_roles;
  if (std::none_of(messages.begin(), messages.end(), [&](const nlohmann::json& m) {
        return std::find(roles.begin(), roles.end(), m.value("role", "")) != roles.end();
      }))
    return absl::InvalidArgumentError(
        absl::StrCat("the conversation has no ", absl::StrJoin(roles, " or "), " message to train on"));
  ZEROD_ASSIGN_OR_RETURN(const RenderedChat r, chat.render(messages));
  ZEROD_ASSIGN_OR_RETURN(const std::vector<Tokenizer::Piece> pieces, tok.encode_pieces(r.text));
  InstructionExample e;
  e.ids.reserve(pieces.size());
  e.trained.assign(pieces.size(), false);
  // Both in order: one pass, as transformers makes its mask.
  size_t span = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    e.ids.push_back(pieces[k].id);
    while (span < r.trained.size() && pieces[k].begin >= r.trained[span].second) {
      // The turn's end: the added token right after the content.
      if (!chat.tagged() && pieces[k].begin == r.trained[span].second && tok.is_added(pieces[k].id))
        e.trained[k] = true;
      ++span;
    }
    if (span < r.trained.size() && pieces[k].end > r.trained[span].first && pieces[k].begin < r.trained[span].second)
      e.trained[k] = true;
  }
  return e;
}

}  // namespace zerod
