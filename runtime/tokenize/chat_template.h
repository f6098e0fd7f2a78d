// A chat template rendered as transformers' apply_chat_template renders
// it, by Jinja itself: render_chat.py, compiled into zeroctl tokenize, run by
// a python3 that has jinja2 (Debian's python3-jinja2; ZEROD_PYTHON names
// another). Jinja is the language of the templates models ship, and they
// use much of it (namespaces, macros, filters, Python's string methods), so
// the engine transformers runs is the only one that renders them all as it
// does; rendering happens once, when data is tokenized, never in training.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

struct ChatTemplateOptions {
  std::vector<std::string> trained_roles = {"assistant"};
  // What strftime_now() gives (Llama 3's dated system preamble), YYYY-MM-DD;
  // empty: today, as transformers does.
  std::string date;
  // A conversation's rendering takes milliseconds; one still going after
  // this is a template that never ends (loops the sandbox lets run on).
  std::chrono::seconds render_limit{60};
};

struct RenderedChat {
  std::string text;
  // The trained parts of `text`, UTF-8 byte ranges in order: what the
  // template's {% generation %} blocks wrote (ChatTemplate::tagged), else
  // each trained message's content as rendered.
  std::vector<std::pair<size_t, size_t>> trained;
};

class ChatTemplate {
 public:
  // The template `text` (from `source`, for messages) compiled with the
  // tokenizer's BOS and EOS as bos_token and eos_token. A template Jinja
  // cannot compile is refused with Jinja's reason and the line.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> open(const Tokenizer& tok, const std::string& source,
                                                            const std::string& text,
                                                            const ChatTemplateOptions& options);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // `messages` (a list of message objects, passed as given) rendered with
  // add_generation_prompt false; a template that fails on them (its
  // raise_exception, an undefined name) gives Jinja's reason.
  absl::StatusOr<RenderedChat> render(const nlohmann::json& messages);

  const ChatTemplateOptions& options() const { return options_; }
  // Whether the trained parts are the template's {% generation %} blocks.
  bool tagged() const { return tagged_; }

 private:
  ChatTemplate(std::string source, ChatTemplateOptions options)
      : source_(std::move(source)), options_(std::move(options)) {}
  absl::Status start();
  absl::StatusOr<nlohmann::json> call(const nlohmann::json& request);

  std::string source_;
  ChatTemplateOptions options_;
  bool tagged_ = false;
  pid_t child_ = -1;
  int socket_ = -1;     // the renderer's stdin and stdout
  std::string buffer_;  // read past the last reply
};

// The template transformers would apply for `tok`: `chat_template_file`'s
// text when given, else the tokenizer's (chat_template.jinja beside it, or
// its tokenizer_config.json's); NotFound where there is none.
absl::StatusOr<std::unique_ptr<ChatTemplate>> open_chat_template(const Tokenizer& tok,
                                                                 const std::string& chat_template_file,
                                                                 const ChatTemplateOptions& options);

}  // namespace zerod
