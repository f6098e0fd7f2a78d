#include "runtime/coordinator/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "runtime/config/command_line.h"
#include "runtime/coordinator/auth.h"
#include "runtime/coordinator/http_frontend.h"
#include "runtime/coordinator/service.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/own_program.h"

namespace zerod {
namespace fs = std::filesystem;
namespace {

// Written only for this user: workers read the token from it.
absl::Status write_private(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  close(fd);
  return absl::OkStatus();
}

// Where workers call back: the listening address, with a wildcard host
// replaced by one they can reach.
std::string advertised(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

int run_zerod(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"zerod: runs zerod training jobs submitted over gRPC and supervises their workers"};
  std::string listen = "127.0.0.1:7070", state_dir, token_file, tls_cert, tls_key, advertise, http_listen;
  std::string chart_js = "/usr/share/javascript/chart.js/chart.min.js";  // Debian's libjs-chart.js
  std::vector<std::string> roots;
  SupervisorOptions opt;
  opt.rules.slots = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opt.worker = program_beside("zero-worker");
  opt.agent = program_beside("zero-agent");
  app.add_option("--state-dir", state_dir, "job records (zerod.db), job directories and logs")->required();
  app.add_option("--listen", listen, "address to serve on; port 0 picks a free one")->capture_default_str();
  app.add_option("--http-listen", http_listen,
                 "address to serve HTTP on (the dashboard and /metrics with the token, /healthz); port 0 picks a "
                 "free one; "
                 "none by default");
  app.add_option("--chart-js", chart_js, "the Chart.js file the dashboard draws its charts with")
      ->capture_default_str();
  app.add_option("--advertise", advertise, "address workers call back on (default: the listening one)");
  app.add_option("--token-file", token_file, "file holding the bearer token (default: $ZEROD_TOKEN)");
  app.add_option("--tls-cert", tls_cert, "PEM certificate: serve TLS only");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--allow-root", roots, "directory a job's absolute paths may point into (repeatable)");
  app.add_option("--slots", opt.rules.slots, "ranks run at once; jobs wait for free slots")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--hang-timeout", opt.hang_timeout_s, "seconds without progress before an attempt is failed")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--host-timeout", opt.host_timeout_s,
                 "seconds a host's ranks may all be silent, while others are heard, before it counts as lost; "
                 "a rank that hears nothing from zerod for twice this long stops itself")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--grace", opt.grace_s, "seconds between SIGTERM and SIGKILL when stopping a job")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--heartbeat-interval", opt.heartbeat_interval_s, "seconds between a worker's heartbeats")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--worker", opt.worker, "the zero-worker binary")->capture_default_str();
  app.add_option("--agent", opt.agent, "the zero-agent binary mpirun starts for each rank")->capture_default_str();
  app.add_option("--mpirun", opt.mpirun, "the mpirun binary")->capture_default_str();
  app.add_option("--mca", opt.mca,
                 "NAME VALUE: an Open MPI setting for every launch (repeatable), e.g. --mca plm_rsh_agent "
                 "/path/agent --mca btl_tcp_if_include 10.0.0.0/24");
  app.add_option("--export", opt.exports,
                 "NAME: a variable of zerod's environment every rank gets, on other hosts too (repeatable)");
  if (auto code = parse_command_line(app, "zerod", out, err, [&] { app.parse(argc, argv); })) return *code;
  const auto bad = [&](const std::string& why) {
    err << "zerod: error: " << why << "\n";
    return kExitBadInput;
  };
  absl::StatusOr<std::string> token = load_token(token_file);
  if (!token.ok()) return bad(std::string(token.status().message()));
  if (tls_cert.empty() != tls_key.empty()) return bad("--tls-cert and --tls-key go together");
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!tls_cert.empty()) {
    grpc::SslServerCredentialsOptions tls;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    auto cert = read_small_file(tls_cert, "TLS certificate file");
    auto key = read_small_file(tls_key, "TLS key file");
    if (!cert.ok()) return bad(std::string(cert.status().message()));
    if (!key.ok()) return bad(std::string(key.status().message()));
    pair.cert_chain = *cert;
    pair.private_key = *key;
    tls.pem_key_cert_pairs.push_back(pair);
    creds = grpc::SslServerCredentials(tls);
    opt.tls_ca = fs::absolute(tls_cert).string();
  }
  for (const std::string& r : roots) {
    std::error_code ec;
    const fs::path real = fs::canonical(r, ec);
    if (ec || !fs::is_directory(real)) return bad(absl::StrCat("--allow-root '", r, "' is not a directory"));
    opt.rules.allowed_roots.push_back(real.string());
  }
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) return bad(absl::StrCat("--state-dir '", state_dir, "': ", ec.message()));
  opt.state_dir = fs::canonical(state_dir).string();
  opt.token_file = opt.state_dir + "/worker.token";
  if (absl::Status s = write_private(opt.token_file, *token); !s.ok()) return bad(std::string(s.message()));

  // Signals are taken by sigwait below, not by whichever thread they hit;
  // jobs are launched with them unblocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Backend backend;
  backend.token = *token;
  StreamHub hub(0.05);
  CoordinatorService coordinator(backend, hub);
  WorkerControlService workers(backend);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, creds, &port);
  builder.RegisterService(&coordinator);
  builder.RegisterService(&workers);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return bad(absl::StrCat("cannot listen on ", listen));
  opt.address = advertise.empty() ? advertised(listen, port) : advertise;
  // HTTP beside gRPC, HTTPS where zerod serves TLS; bound before any job is
  // taken, so that a port in use stops zerod here.
  std::unique_ptr<HttpFrontend> http;
  if (!http_listen.empty()) {
    if (!fs::is_regular_file(chart_js)) {
      err << "zerod: warning: no Chart.js at " << chart_js << " (--chart-js): the dashboard shows no charts\n";
    }
    absl::StatusOr<std::unique_ptr<HttpFrontend>> h =
        HttpFrontend::start({http_listen, tls_cert, tls_key, chart_js}, backend);
    if (!h.ok()) {
      server->Shutdown();
      return bad(std::string(h.status().message()));
    }
    http = *std::move(h);
  }
  absl::StatusOr<std::unique_ptr<Supervisor>> sup = Supervisor::start(opt);
  if (!sup.ok()) {
    server->Shutdown();
    return bad(std::string(sup.status().message()));
  }
  backend.supervisor.store(sup->get());
  const std::string address = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  if (absl::Status s = write_private(opt.state_dir + "/zerod.address", address + "\n"); !s.ok()) {
    err << "zerod: " << s.message() << "\n";
  }
  if (http) {
    const std::string http_address = absl::StrCat(http_listen.substr(0, http_listen.rfind(':')), ":", http->port());
    if (absl::Status s = write_private(opt.state_dir + "/zerod.http", http_address + "\n"); !s.ok()) {
      err << "zerod: " << s.message() << "\n";
    }
    out << "zerod: " << (tls_cert.empty() ? "HTTP" : "HTTPS") << " on " << http_address
        << " (the dashboard and /metrics with the token, /healthz)" << std::endl;
  }
  out << "zerod: serving on " << address << (tls_cert.empty() ? "" : " (TLS)") << ", state in " << opt.state_dir
      << ", " << opt.rules.slots << " slots" << std::endl;

  int sig = 0;
  sigwait(&stop_signals, &sig);
  out << "zerod: stopping on signal " << sig << "; running jobs keep running" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http.reset();
  backend.supervisor.store(nullptr);
  sup->reset();
  return kExitOk;
}

}  // namespace zerod
