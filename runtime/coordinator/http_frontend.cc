#include "runtime/coordinator/http_frontend.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/metrics_text.h"

namespace zerod {
namespace {

// A handler timed and counted under its path, its status the outcome.
httplib::Server::Handler counted(Backend& backend, std::string path, httplib::Server::Handler body) {
  return
      [&backend, path = std::move(path), body = std::move(body)](const httplib::Request& req, httplib::Response& res) {
        const auto t0 = std::chrono::steady_clock::now();
        body(req, res);
        backend.stats.record(path, std::to_string(res.status),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      };
}

// The bearer token, or a 401 saying what is wrong (never the token).
bool admitted(const Backend& backend, const httplib::Request& req, httplib::Response& res) {
  if (bearer_matches(req.get_header_value("Authorization"), backend.token)) return true;
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(req.has_header("Authorization") ? "the bearer token is not this zerod's\n"
                                                  : "no bearer token: this zerod requires one\n",
                  "text/plain");
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::start(const HttpOptions& options, Backend& backend) {
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  std::string host = colon == std::string::npos ? "" : options.listen.substr(0, colon);
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen '", options.listen, "' is not host:port"));
  }
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  std::unique_ptr<HttpFrontend> f(new HttpFrontend());
  if (options.tls_cert.empty()) {
    f->server_ = std::make_unique<httplib::Server>();
  } else {
    auto tls = std::make_unique<httplib::SSLServer>(options.tls_cert.c_str(), options.tls_key.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTPS: cannot use --tls-cert '", options.tls_cert, "' with --tls-key '", options.tls_key, "'"));
    }
    f->server_ = std::move(tls);
  }
  httplib::Server& s = *f->server_;
  // SO_REUSEADDR alone: cpp-httplib's SO_REUSEPORT would share a port
  // another server holds instead of saying it is in use.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Requests are small: a client that sends more, or too slowly, is cut off.
  s.set_payload_max_length(64 << 10);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.set_keep_alive_timeout(5);
  // Scrapers and pages at once: a client that holds a connection holds a thread.
  s.new_task_queue = [] { return new httplib::ThreadPool(32); };
  s.Get("/healthz", counted(backend, "/healthz", [&backend](const httplib::Request&, httplib::Response& res) {
          const bool up = backend.supervisor.load() != nullptr;
          res.status = up ? 200 : 503;
          res.set_content(up ? "ok\n" : "starting\n", "text/plain");
        }));
  s.Get("/metrics", counted(backend, "/metrics", [&backend](const httplib::Request& req, httplib::Response& res) {
          if (!admitted(backend, req, res)) return;
          Supervisor* sup = backend.supervisor.load();
          auto jobs = sup ? sup->metrics() : absl::UnavailableError("zerod is starting");
          if (!jobs.ok()) {
            res.status = 503;
            res.set_content(absl::StrCat(jobs.status().message(), "\n"), "text/plain");
            return;
          }
          res.set_content(metrics_text(*jobs, backend.stats), "text/plain; version=0.0.4; charset=utf-8");
        }));
  f->port_ = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (f->port_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen: cannot listen on ", options.listen, " (in use, or not this machine's address)"));
  }
  f->thread_ = std::thread([&s] { s.listen_after_bind(); });
  return f;
}

HttpFrontend::~HttpFrontend() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace zerod
