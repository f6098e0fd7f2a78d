#include "runtime/tokenize/instruction_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

// Python's str.strip(), which Jinja's trim filter is: the whitespace of
// str.isspace() at either end.
std::string trimmed(const std::string& s) {
  static const char* const kSpaces[] = {"\t",     "\n",     "\v",     "\f",     "\r",     "\x1c",   "\x1d",   "\x1e",
                                        "\x1f",   " ",      "\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
                                        "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
                                        "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  auto space_at = [&](size_t at, bool back) -> size_t {
    for (const char* sp : kSpaces) {
      const size_t n = std::char_traits<char>::length(sp);
      if (back ? (at >= n && s.compare(at - n, n, sp) == 0) : s.compare(at, n, sp) == 0) return n;
    }
    return 0;
  };
  size_t b = 0, e = s.size();
  while (b < e)
    if (size_t n = space_at(b, false))
      b += n;
    else
      break;
  while (e > b)
    if (size_t n = space_at(e, true))
      e -= n;
    else
      break;
  return s.substr(b, e - b);
}

}  // namespace

ChatFormat chat_format_of(const std::string& chat_template) {
  if (chat_template.find("<|start_header_id|>") != std::string::npos) return ChatFormat::kLlama3;
  if (chat_template.find("<|im_start|>") != std::string::npos) return ChatFormat::kChatMl;
  return ChatFormat::kNone;
}

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

absl::StatusOr<InstructionExample> chat_example(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  const ChatFormat format = chat_format_of(tok.config().chat_template);
  if (format == ChatFormat::kNone)
    return absl::InvalidArgumentError(absl::StrCat(tok.source(),
                                                   tok.config().chat_template.empty()
                                                       ? ": the tokenizer has no chat template"
                                                       : ": its chat template is not one zerod renders (Llama 3's "
                                                         "headers or ChatML)",
                                                   "; give prompt and response records instead"));
  if (std::none_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }))
    return absl::InvalidArgumentError("a conversation without an assistant message has nothing to train on");
  // The format's markers must be tokens of the vocabulary, or they would be
  // encoded as text.
  std::vector<std::string> markers = {"<|im_start|>", "<|im_end|>"};
  if (format == ChatFormat::kLlama3)
    markers = {tok.config().bos_token, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  for (const std::string& marker : markers)
    if (!tok.token_id(marker))
      return absl::InvalidArgumentError(
          absl::StrCat(tok.source(), ": the chat format's token '", marker, "' is not in the vocabulary"));
  std::vector<Part> parts;
  if (format == ChatFormat::kLlama3) {
    parts.push_back({tok.config().bos_token, false});
    for (const ChatMessage& m : messages) {
      parts.push_back({absl::StrCat("<|start_header_id|>", m.role, "<|end_header_id|>\n\n"), false});
      parts.push_back({absl::StrCat(trimmed(m.content), "<|eot_id|>"), m.role == "assistant"});
    }
  } else {
    for (const ChatMessage& m : messages) {
      parts.push_back({absl::StrCat("<|im_start|>", m.role, "\n"), false});
      parts.push_back({absl::StrCat(m.content, "<|im_end|>"), m.role == "assistant"});
      parts.push_back({"\n", false});
    }
  }
  return encode_parts(tok, parts, false);
}

}  // namespace zerod
