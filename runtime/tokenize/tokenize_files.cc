#include "runtime/tokenize/tokenize_files.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/strict_json.h"
#include "runtime/data/token_shard.h"
#include "runtime/tokenize/instruction_data.h"
#include "runtime/tokenize/pack_windows.h"

namespace zerod {
namespace {

using nlohmann::json;

class Builder {
 public:
  Builder(const Tokenizer& tok, const TokenizeOptions& o) : tok_(tok), o_(o) {}

  absl::Status document(const std::string& text, const std::string& where) {
    ZEROD_RETURN_IF_ERROR(kind(false, where));
    absl::StatusOr<std::vector<uint32_t>> ids = tok_.encode(text, true);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", ids.status().message()));
    if (o_.append_eos) {
      if (!tok_.eos()) return absl::InvalidArgumentError(absl::StrCat(tok_.source(), ": no eos_token to append"));
      if (ids->empty() || ids->back() != *tok_.eos()) ids->push_back(*tok_.eos());
    }
    ++out_.documents;
    if (!o_.pack) {
      out_.ids.insert(out_.ids.end(), ids->begin(), ids->end());
      return absl::OkStatus();
    }
    // Pieces of at most a window, each trained on all its ids but its first.
    for (size_t from = 0; from < ids->size(); from += o_.seq_len) {
      const size_t n = std::min(ids->size() - from, size_t(o_.seq_len));
      add_packed(ids->begin() + from, n, [](size_t) { return true; });
    }
    return absl::OkStatus();
  }

  // One example a window: an id is a target when its example trains on it,
  // but never the window's first, which nothing before it predicts.
  // Packed, the same, the window's first being the example's.
  absl::Status example(absl::StatusOr<InstructionExample> e, const std::string& where) {
    ZEROD_RETURN_IF_ERROR(kind(true, where));
    if (!e.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.status().message()));
    if (e->ids.size() > size_t(o_.seq_len)) {
      switch (o_.long_examples) {
        case LongExamples::kRefuse:
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": the example's ", e->ids.size(), " ids are more than --seq-len ", o_.seq_len,
                           ", its window (an example is never split; --long-examples drop or truncate lets it go)"));
        case LongExamples::kDrop:
          ++out_.dropped;
          return absl::OkStatus();
        case LongExamples::kTruncate:
          truncate(*e);
          ++out_.truncated;
          break;
      }
    }
    const size_t n = e->ids.size();
    if (std::count(e->trained.begin() + std::min<size_t>(n, 1), e->trained.end(), true) == 0)
      return absl::InvalidArgumentError(absl::StrCat(where, ": the example has no id to train on"));
    ++out_.examples;
    if (o_.pack) {
      add_packed(e->ids.begin(), n, [&](size_t k) { return bool(e->trained[k]); });
      return absl::OkStatus();
    }
    for (size_t k = 0; k < n; ++k) {
      const bool target = k > 0 && e->trained[k];
      out_.ids.push_back(e->ids[k] | (target ? 0 : kNotTarget));
      out_.targets += target;
    }
    out_.ids.insert(out_.ids.end(), o_.seq_len - n, pad());
    filled_ += int64_t(n);
    return absl::OkStatus();
  }

  Tokenized take() && {
    if (o_.pack) return std::move(*this).packed();
    out_.window = out_.examples > 0 ? o_.seq_len : 0;
    if (out_.window > 0) {
      out_.windows = out_.examples;
      out_.fill = double(filled_) / double(out_.ids.size());
    }
    return std::move(out_);
  }

 private:
  absl::Status kind(bool instruction, const std::string& where) {
    if (!kind_) {
      kind_ = instruction;
      if (instruction && o_.seq_len < 1)
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": instruction data needs --seq-len, the window each example is laid out in"));
    }
    if (*kind_ != instruction)
      return absl::InvalidArgumentError(absl::StrCat(
          where, instruction ? ": an instruction example among documents" : ": a document among instruction examples",
          " (one output holds one kind)"));
    return absl::OkStatus();
  }

  uint32_t pad() const { return tok_.eos().value_or(0) | kNotTarget; }

  // LongExamples::kTruncate's policy: the prompt's start, up to half the
  // window or what the response leaves, then the response's start.
  void truncate(InstructionExample& e) const {
    const auto S = size_t(o_.seq_len);
    const size_t prompt = std::find(e.trained.begin(), e.trained.end(), true) - e.trained.begin();
    const size_t response = std::min(e.ids.size() - prompt, S - std::min(prompt, S / 2));
    const size_t kept_prompt = std::min(prompt, S - response);
    e.ids.erase(e.ids.begin() + kept_prompt, e.ids.begin() + prompt);
    e.trained.erase(e.trained.begin() + kept_prompt, e.trained.begin() + prompt);
    e.ids.resize(S);
    e.trained.resize(S);
  }

  // A document of `n` ids from `ids` on, to be packed: its first flagged
  // as a document's start, never a target; the rest targets as `trained` says.
  template <typename It, typename Trained>
  void add_packed(It ids, size_t n, Trained trained) {
    starts_.push_back(int64_t(out_.ids.size()));
    lengths_.push_back(int(n));
    out_.ids.push_back(ids[0] | kDocStart | kNotTarget);
    for (size_t k = 1; k < n; ++k) {
      const bool target = trained(k);
      out_.ids.push_back(ids[k] | (target ? 0 : kNotTarget));
      out_.targets += target;
    }
  }

  // The documents laid out in the windows pack_windows chose, in the order
  // it placed them, each window's rest an EOS padding document of its own.
  Tokenized packed() && {
    const std::vector<std::vector<int64_t>> windows = pack_windows(lengths_, o_.seq_len);
    const auto T = size_t(o_.seq_len);
    std::vector<uint32_t> ids;
    ids.reserve(windows.size() * T);
    for (const std::vector<int64_t>& docs : windows) {
      const size_t first = ids.size();
      for (const int64_t d : docs) {
        const auto from = out_.ids.begin() + starts_[d];
        ids.insert(ids.end(), from, from + lengths_[d]);
      }
      if (ids.size() < first + T) {
        ids.push_back(pad() | kDocStart);
        ids.resize(first + T, pad());
      }
    }
    out_.fill = ids.empty() ? 0 : double(out_.ids.size()) / double(ids.size());
    out_.ids = std::move(ids);
    out_.window = o_.seq_len;
    out_.packed = true;
    out_.windows = int64_t(windows.size());
    return std::move(out_);
  }

  const Tokenizer& tok_;
  const TokenizeOptions& o_;
  std::optional<bool> kind_;  // instruction examples
  Tokenized out_;
  int64_t filled_ = 0;           // unpacked examples' ids, not padding
  std::vector<int64_t> starts_;  // packed: each document's first id in out_.ids
  std::vector<int> lengths_;     // and its length
};

absl::StatusOr<std::string> string_at(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string())
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" is not a string"));
  return j[key].get<std::string>();
}

// The records' formats, each turned into a prompt and response or a
// conversation; the chat template is started at the first conversation.
class Records {
 public:
  Records(Builder& b, const Tokenizer& tok, const TokenizeOptions& o) : b_(b), tok_(tok), o_(o) {}

  absl::Status record(const json& j, const std::string& where) {
    if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
    if (j.contains("text")) {
      ZEROD_ASSIGN_OR_RETURN(const std::string text, string_at(j, "text", where));
      return b_.document(text, where);
    }
    if (j.contains("messages")) return conversation(messages(j["messages"], "messages", where), where);
    if (j.contains("conversations")) return conversation(sharegpt(j["conversations"], where), where);
    if (j.contains("instruction")) return conversation(alpaca(j, where), where);
    if (j.contains("prompt") && j["prompt"].is_array()) {
      ZEROD_ASSIGN_OR_RETURN(json all, messages(j["prompt"], "prompt", where));
      ZEROD_ASSIGN_OR_RETURN(const json completion, messages(j.value("completion", json()), "completion", where));
      all.insert(all.end(), completion.begin(), completion.end());
      return conversation(all, where);
    }
    if (j.contains("prompt") || j.contains("response") || j.contains("completion")) {
      ZEROD_ASSIGN_OR_RETURN(const std::string prompt, string_at(j, "prompt", where));
      ZEROD_ASSIGN_OR_RETURN(const std::string response,
                             string_at(j, j.contains("completion") ? "completion" : "response", where));
      return b_.example(prompt_response_example(tok_, prompt, response), where);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     ": a record holds \"text\"; \"prompt\" and \"response\" or \"completion\"; \"messages\"; "
                     "\"conversations\" (ShareGPT); or \"instruction\" and \"output\" (Alpaca)"));
  }

 private:
  // A list of {"role", "content"} text messages under `key`, as given.
  static absl::StatusOr<json> messages(const json& m, const char* key, const std::string& where) {
    if (!m.is_array() || m.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"", key, "\" is not a list of messages"));
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string at = absl::StrCat(where, ": ", key, "[", i, "]");
      if (!m[i].is_object()) return absl::InvalidArgumentError(absl::StrCat(at, " is not an object"));
      ZEROD_RETURN_IF_ERROR(string_at(m[i], "role", at).status());
      ZEROD_RETURN_IF_ERROR(string_at(m[i], "content", at).status());
    }
    return m;
  }

  static absl::StatusOr<json> sharegpt(const json& c, const std::string& where) {
    if (!c.is_array() || c.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"conversations\" is not a list of turns"));
    json out = json::array();
    for (size_t i = 0; i < c.size(); ++i) {
      const std::string at = absl::StrCat(where, ": conversations[", i, "]");
      if (!c[i].is_object()) return absl::InvalidArgumentError(absl::StrCat(at, " is not an object"));
      ZEROD_ASSIGN_OR_RETURN(const std::string from, string_at(c[i], "from", at));
      ZEROD_ASSIGN_OR_RETURN(std::string value, string_at(c[i], "value", at));
      const char* role = from == "human" ? "user" : from == "gpt" ? "assistant" : from == "system" ? "system" : nullptr;
      if (role == nullptr)
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": \"from\" is '", from, "', not one of human, gpt and system"));
      out.push_back({{"role", role}, {"content", std::move(value)}});
    }
    return out;
  }

  static absl::StatusOr<json> alpaca(const json& j, const std::string& where) {
    ZEROD_ASSIGN_OR_RETURN(std::string user, string_at(j, "instruction", where));
    ZEROD_ASSIGN_OR_RETURN(std::string output, string_at(j, "output", where));
    if (j.contains("input") && !j["input"].is_null()) {
      ZEROD_ASSIGN_OR_RETURN(const std::string input, string_at(j, "input", where));
      if (!input.empty()) absl::StrAppend(&user, "\n\n", input);
    }
    json out = json::array();
    if (j.contains("system") && !j["system"].is_null()) {
      ZEROD_ASSIGN_OR_RETURN(std::string system, string_at(j, "system", where));
      out.push_back({{"role", "system"}, {"content", std::move(system)}});
    }
    out.push_back({{"role", "user"}, {"content", std::move(user)}});
    out.push_back({{"role", "assistant"}, {"content", std::move(output)}});
    return out;
  }

  absl::Status conversation(const absl::StatusOr<json>& messages, const std::string& where) {
    ZEROD_RETURN_IF_ERROR(messages.status());
    if (chat_ == nullptr) {
      absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = open_chat_template(tok_, o_.chat_template, o_.chat);
      if (!chat.ok()) return absl::Status(chat.status().code(), absl::StrCat(where, ": ", chat.status().message()));
      chat_ = *std::move(chat);
    }
    return b_.example(chat_example(tok_, *chat_, *messages), where);
  }

  Builder& b_;
  const Tokenizer& tok_;
  const TokenizeOptions& o_;
  std::unique_ptr<ChatTemplate> chat_;
};

absl::Status jsonl_file(Records& r, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ":", number);
    ZEROD_ASSIGN_OR_RETURN(const json j, parse_strict_json(line, where));
    ZEROD_RETURN_IF_ERROR(r.record(j, where));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return absl::OkStatus();
}

// A JSON list of records, or JSON lines.
absl::Status json_file(Records& r, const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(const std::string text, read_input_file(path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '[') return jsonl_file(r, path);
  ZEROD_ASSIGN_OR_RETURN(const json records, parse_strict_json(text, path));
  for (size_t i = 0; i < records.size(); ++i)
    ZEROD_RETURN_IF_ERROR(r.record(records[i], absl::StrCat(path, "[", i, "]")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tokenized> tokenize_files(const Tokenizer& tok, const std::vector<std::string>& inputs,
                                         const TokenizeOptions& options) {
  if (options.pack && options.seq_len < 1)
    return absl::InvalidArgumentError("--pack needs --seq-len, the window documents and examples are packed into");
  Builder b(tok, options);
  Records records(b, tok, options);
  for (const std::string& path : inputs) {
    if (absl::EndsWith(path, ".jsonl")) {
      ZEROD_RETURN_IF_ERROR(jsonl_file(records, path));
      continue;
    }
    if (absl::EndsWith(path, ".json")) {
      ZEROD_RETURN_IF_ERROR(json_file(records, path));
      continue;
    }
    ZEROD_ASSIGN_OR_RETURN(const std::string text, read_input_file(path));
    if (const int64_t at = first_invalid_utf8(text); at >= 0)
      return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", at, " is not UTF-8"));
    ZEROD_RETURN_IF_ERROR(b.document(text, path));
  }
  Tokenized t = std::move(b).take();
  if (t.documents + t.examples == 0)
    return absl::InvalidArgumentError(
        t.dropped > 0 ? absl::StrCat("all ", t.dropped, " examples are longer than --seq-len and dropped")
                      : std::string("the inputs hold no document or example"));
  if (t.packed && t.ids.empty()) return absl::InvalidArgumentError("the inputs' documents hold no id to pack");
  return t;
}

absl::Status write_tokenized(const std::string& path, const Tokenized& t, int64_t vocab_size) {
  if (t.window > 0) return write_window_shard(path, t.ids, t.window, t.packed);
  if (vocab_size > 65536) return write_token_shard32(path, t.ids);
  return write_token_shard(path, std::vector<uint16_t>(t.ids.begin(), t.ids.end()));
}

}  // namespace zerod
