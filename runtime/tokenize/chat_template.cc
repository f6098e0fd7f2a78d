#include "runtime/tokenize/chat_template.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/core/strict_json.h"

extern char** environ;

namespace zerod {

extern const char kRenderChatPy[];  // render_chat.py, compiled in (render_chat_py.cc.in)

namespace {

using nlohmann::json;

// Debian's interpreter, which python3-jinja2 installs for, unless
// ZEROD_PYTHON names another.
std::string python() {
  if (const char* p = std::getenv("ZEROD_PYTHON"); p != nullptr && *p != '\0') return p;
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::open(const Tokenizer& tok, const std::string& source,
                                                                 const std::string& text,
                                                                 const ChatTemplateOptions& options) {
  if (const int64_t at = first_invalid_utf8(text); at >= 0)
    return absl::InvalidArgumentError(absl::StrCat(source, ": byte ", at, " is not UTF-8"));
  std::unique_ptr<ChatTemplate> t(new ChatTemplate(source, options));
  ZEROD_RETURN_IF_ERROR(t->start());
  json variables = json::object();
  if (!tok.config().bos_token.empty()) variables["bos_token"] = tok.config().bos_token;
  if (!tok.config().eos_token.empty()) variables["eos_token"] = tok.config().eos_token;
  const json setup = {{"template", text},
                      {"variables", variables},
                      {"date", options.date.empty() ? json() : json(options.date)},
                      {"roles", options.trained_roles}};
  ZEROD_ASSIGN_OR_RETURN(const json reply, t->call(setup));
  if (reply.contains("error"))
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the chat template does not compile: ", reply["error"].get<std::string>()));
  t->tagged_ = reply.value("generation", false);
  return t;
}

absl::Status ChatTemplate::start() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::string interpreter = python(), isolated = "-I", dash_x = "-X", utf8 = "utf8", dash_c = "-c",
              script = kRenderChatPy;
  char* argv[] = {interpreter.data(), isolated.data(), dash_x.data(), utf8.data(),
                  dash_c.data(),      script.data(),   nullptr};
  const int rc = posix_spawnp(&child_, argv[0], &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  socket_ = fds[0];
  if (rc != 0) {
    child_ = -1;
    return absl::FailedPreconditionError(absl::StrCat("chat templates are rendered by ", interpreter,
                                                      " with jinja2, which cannot start: ", std::strerror(rc),
                                                      " (on Debian: apt-get install python3-jinja2)"));
  }
  return absl::OkStatus();
}

ChatTemplate::~ChatTemplate() {
  if (socket_ >= 0) close(socket_);  // the renderer reads its end of input and exits
  if (child_ > 0) {
    int status;
    while (waitpid(child_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

absl::StatusOr<json> ChatTemplate::call(const json& request) {
  const std::string line = request.dump(-1, ' ', false, json::error_handler_t::strict) + "\n";
  for (size_t sent = 0; sent < line.size();) {
    const ssize_t n = send(socket_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the renderer is gone: its last words are read below
    sent += size_t(n);
  }
  size_t end;
  const auto deadline = std::chrono::steady_clock::now() + options_.render_limit;
  while ((end = buffer_.find('\n')) == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{socket_, POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, int(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      kill(child_, SIGKILL);  // reaped by the destructor
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ": the chat template renders one conversation for more than ",
                       options_.render_limit.count(), " s; a template that ends takes far less"));
    }
    char chunk[65536];
    const ssize_t n = read(socket_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return absl::FailedPreconditionError(absl::StrCat(source_, ": the chat template's renderer (", python(),
                                                        " with jinja2) stopped; its error is above"));
    buffer_.append(chunk, size_t(n));
  }
  const std::string reply = buffer_.substr(0, end);
  buffer_.erase(0, end + 1);
  ZEROD_ASSIGN_OR_RETURN(json j, parse_strict_json(reply, "the chat template's renderer"));
  if (j.contains("fatal")) return absl::FailedPreconditionError(j["fatal"].get<std::string>());
  return j;
}

absl::StatusOr<RenderedChat> ChatTemplate::render(const json& messages) {
  ZEROD_ASSIGN_OR_RETURN(const json reply, call({{"messages", messages}}));
  if (reply.contains("error"))
    return absl::InvalidArgumentError(
        absl::StrCat("the chat template (", source_, ") fails on it: ", reply["error"].get<std::string>()));
  RenderedChat r;
  r.text = reply["text"].get<std::string>();
  for (const json& span : reply["spans"]) r.trained.push_back({span[0].get<size_t>(), span[1].get<size_t>()});
  return r;
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> open_chat_template(const Tokenizer& tok,
                                                                 const std::string& chat_template_file,
                                                                 const ChatTemplateOptions& options) {
  if (!chat_template_file.empty()) {
    ZEROD_ASSIGN_OR_RETURN(const std::string text, read_input_file(chat_template_file));
    return ChatTemplate::open(tok, chat_template_file, text, options);
  }
  if (tok.config().chat_template.empty())
    return absl::NotFoundError(
        absl::StrCat(tok.source(),
                     ": the tokenizer has no chat template; give one with --chat-template, or prompt "
                     "and response records"));
  return ChatTemplate::open(tok, tok.config().chat_template_source, tok.config().chat_template, options);
}

}  // namespace zerod
