#include "runtime/coordinator/http_frontend.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/dashboard.h"
#include "runtime/coordinator/metrics_text.h"
#include "runtime/core/whole_file.h"

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

constexpr char kCookie[] = "zerod_token";

// The token's cookie in a Cookie header, or "".
std::string cookie_token(const httplib::Request& req) {
  const std::string cookies = req.get_header_value("Cookie");
  const std::string key = absl::StrCat(kCookie, "=");
  for (size_t at = 0; at < cookies.size();) {
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    std::string_view c(cookies.data() + at, end - at);
    while (!c.empty() && c.front() == ' ') c.remove_prefix(1);
    if (c.substr(0, key.size()) == key) return std::string(c.substr(key.size()));
    at = end + 1;
  }
  return "";
}

// The bearer token in the Authorization header or the dashboard's cookie,
// or a 401 saying what is wrong (never the token).
bool admitted(const Backend& backend, const httplib::Request& req, httplib::Response& res) {
  const std::string cookie = cookie_token(req);
  if (bearer_matches(req.get_header_value("Authorization"), backend.token) ||
      bearer_matches(absl::StrCat("Bearer ", cookie), backend.token)) {
    return true;
  }
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(req.has_header("Authorization") || !cookie.empty()
                      ? "the bearer token is not this zerod's\n"
                      : "no bearer token: this zerod requires one (a browser: open /?token=TOKEN)\n",
                  "text/plain");
  return false;
}

void json_reply(httplib::Response& res, int status, const nlohmann::json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

struct ListenAddress {
  std::string host;  // without an IPv6 address's brackets
  int port;
};

absl::StatusOr<ListenAddress> parse_listen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen '", listen, "' is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return ListenAddress{std::move(host), port};
}

// HTTP, or HTTPS with the options' certificate and key; with the limits
// every request is served under.
absl::StatusOr<std::unique_ptr<httplib::Server>> make_server(const HttpOptions& options) {
  std::unique_ptr<httplib::Server> s;
  if (options.tls_cert.empty()) {
    s = std::make_unique<httplib::Server>();
  } else {
    auto tls = std::make_unique<httplib::SSLServer>(options.tls_cert.c_str(), options.tls_key.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("HTTPS: cannot use --tls-cert '", options.tls_cert, "' with --tls-key '", options.tls_key, "'"));
    }
    s = std::move(tls);
  }
  // Requests are small: a client that sends more, or too slowly, is cut off.
  s->set_payload_max_length(64 << 10);
  s->set_read_timeout(5, 0);
  s->set_write_timeout(5, 0);
  // A connection holds one of the pool's threads while it is open, idle or
  // not: one request a connection, so that 200 pages polling at once (or
  // clients that keep connections open) do not wait for threads.
  s->set_keep_alive_max_count(1);
  s->new_task_queue = [] { return new httplib::ThreadPool(32); };
  return s;
}

// /healthz (open to all) and /metrics.
void add_status_routes(httplib::Server& s, Backend& backend) {
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
}

// The dashboard's page and its chart library (`chart_js`, when given).
// The token given once in the address becomes a cookie (HttpOnly: no
// script reads it; SameSite: no other site sends it; Secure over `tls`),
// and the address loses it.
void add_dashboard_routes(httplib::Server& s, Backend& backend, bool tls, const std::optional<std::string>& chart_js) {
  s.Get("/", counted(backend, "/", [&backend, tls](const httplib::Request& req, httplib::Response& res) {
          if (req.has_param("token")) {
            if (!bearer_matches(absl::StrCat("Bearer ", req.get_param_value("token")), backend.token)) {
              res.status = 401;
              res.set_content("the token is not this zerod's\n", "text/plain");
              return;
            }
            res.set_header("Set-Cookie", absl::StrCat(kCookie, "=", backend.token,
                                                      "; Path=/; HttpOnly; SameSite=Strict", tls ? "; Secure" : ""));
            res.set_redirect(
                req.has_param("job")
                    ? absl::StrCat("/?job=", httplib::detail::encode_query_param(req.get_param_value("job")))
                    : "/",
                303);
            return;
          }
          if (!admitted(backend, req, res)) return;
          res.set_content(kDashboardHtml, "text/html; charset=utf-8");
        }));
  s.Get("/chart.js",
        counted(backend, "/chart.js", [&backend, &chart_js](const httplib::Request& req, httplib::Response& res) {
          if (!admitted(backend, req, res)) return;
          if (!chart_js) {
            res.status = 404;
            return;
          }
          res.set_content(*chart_js, "text/javascript; charset=utf-8");
        }));
}

// The dashboard's data: every job, and one job's series.
void add_api_routes(httplib::Server& s, Backend& backend) {
  s.Get("/api/jobs", counted(backend, "/api/jobs", [&backend](const httplib::Request& req, httplib::Response& res) {
          if (!admitted(backend, req, res)) return;
          Supervisor* sup = backend.supervisor.load();
          auto jobs = sup ? sup->list({}) : absl::UnavailableError("zerod is starting");
          if (!jobs.ok()) return json_reply(res, 503, {{"error", std::string(jobs.status().message())}});
          nlohmann::json list = nlohmann::json::array();
          for (const v1::Job& j : *jobs) list.push_back(job_json(j, sup->series(j.id())));
          json_reply(res, 200, {{"jobs", list}});
        }));
  s.Get(R"(/api/jobs/([^/]+))",
        counted(backend, "/api/jobs/ID", [&backend](const httplib::Request& req, httplib::Response& res) {
          if (!admitted(backend, req, res)) return;
          Supervisor* sup = backend.supervisor.load();
          auto job = sup ? sup->get(req.matches[1]) : absl::UnavailableError("zerod is starting");
          if (!job.ok()) {
            const int status = absl::IsNotFound(job.status()) ? 404 : absl::IsInvalidArgument(job.status()) ? 400 : 503;
            return json_reply(res, status, {{"error", std::string(job.status().message())}});
          }
          json_reply(res, 200, series_json(*job, sup->series(job->id()), sup->eval_series(job->id())));
        }));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::start(const HttpOptions& options, Backend& backend) {
  ZEROD_ASSIGN_OR_RETURN(const ListenAddress at, parse_listen(options.listen));
  std::unique_ptr<HttpFrontend> f(new HttpFrontend());
  ZEROD_ASSIGN_OR_RETURN(f->server_, make_server(options));
  httplib::Server& s = *f->server_;
  // SO_REUSEADDR alone: cpp-httplib's SO_REUSEPORT would share a port
  // another server holds instead of saying it is in use. The socket is kept
  // to widen its backlog once bound (below).
  s.set_socket_options([f = f.get()](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    f->socket_ = sock;
  });
  f->chart_js_ = options.chart_js.empty() ? std::nullopt : read_whole_file(options.chart_js);
  add_status_routes(s, backend);
  add_dashboard_routes(s, backend, !options.tls_cert.empty(), f->chart_js_);
  add_api_routes(s, backend);
  f->port_ = at.port == 0 ? s.bind_to_any_port(at.host) : (s.bind_to_port(at.host, at.port) ? at.port : -1);
  if (f->port_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen: cannot listen on ", options.listen, " (in use, or not this machine's address)"));
  }
  // Debian's cpp-httplib listens with a backlog of 5: 200 clients
  // connecting at once would see their SYNs dropped and retried a second
  // later. Linux takes a second listen() on the socket as the new backlog.
  ::listen(f->socket_, SOMAXCONN);
  f->thread_ = std::thread([&s] { s.listen_after_bind(); });
  return f;
}

HttpFrontend::~HttpFrontend() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace zerod
