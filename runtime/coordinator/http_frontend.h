// zerod's HTTP face beside gRPC, served by cpp-httplib: /healthz, open to
// probes; behind the same bearer token as the gRPC API, /metrics in
// Prometheus' text format and the dashboard (/, its Chart.js, the JSON of
// /api/jobs and /api/jobs/ID). HTTPS with the same certificate where zerod
// serves TLS. A browser gives the token once, /?token=TOKEN, and keeps it
// in an HttpOnly cookie. Each request is counted in the backend's
// RequestStats.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "runtime/coordinator/service.h"

namespace httplib {
class Server;
}

namespace zerod {

struct HttpOptions {
  std::string listen;             // host:port; port 0 picks a free one
  std::string tls_cert, tls_key;  // PEM files; both or neither
  std::string chart_js;           // the Chart.js the dashboard loads; "" or unreadable: no charts
};

class HttpFrontend {
 public:
  // Binds now, so that a port in use is an error here, then serves on
  // threads of its own.
  static absl::StatusOr<std::unique_ptr<HttpFrontend>> start(const HttpOptions& options, Backend& backend);
  ~HttpFrontend();  // stops serving, waiting for requests in flight

  int port() const { return port_; }

 private:
  HttpFrontend() = default;
  std::optional<std::string> chart_js_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  int socket_ = -1;  // the listening socket
};

}  // namespace zerod
