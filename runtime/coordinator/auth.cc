#include "runtime/coordinator/auth.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

constexpr char kHeader[] = "authorization";
constexpr char kScheme[] = "Bearer ";

// Compares every byte whatever the first difference, so the time taken says
// nothing about how much of a guess was right (the length is not secret).
bool same_secret(std::string_view given, std::string_view secret) {
  if (given.size() != secret.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < secret.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ secret[i]);
  return diff == 0;
}

}  // namespace

bool bearer_matches(std::string_view value, const std::string& token) {
  return value.substr(0, sizeof(kScheme) - 1) == kScheme && same_secret(value.substr(sizeof(kScheme) - 1), token);
}

grpc::Status check_token(const grpc::ServerContextBase& ctx, const std::string& token) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(kHeader);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no bearer token: this zerod requires one on every call");
  }
  std::string_view value(it->second.data(), it->second.size());
  if (!bearer_matches(value, token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token is not this zerod's");
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::string> read_small_file(const std::string& path, const std::string& what) {
  std::optional<std::string> text = read_whole_file(path);
  if (!text) return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "' cannot be read"));
  return *std::move(text);
}

absl::StatusOr<std::string> load_token(const std::string& file) {
  std::string token;
  std::string source;
  if (!file.empty()) {
    ZEROD_ASSIGN_OR_RETURN(token, read_small_file(file, "token file"));
    source = absl::StrCat("token file '", file, "'");
  } else if (const char* env = std::getenv("ZEROD_TOKEN")) {
    token = env;
    source = "ZEROD_TOKEN";
  } else {
    return absl::InvalidArgumentError("no token: give --token-file or set ZEROD_TOKEN");
  }
  absl::StripAsciiWhitespace(&token);
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(source, " holds an empty token"));
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": a token is printable ASCII without spaces"));
    }
  }
  return token;
}

void add_token(grpc::ClientContext& ctx, const std::string& token) {
  ctx.AddMetadata(kHeader, absl::StrCat(kScheme, token));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> open_channel(const std::string& address, const std::string& ca_file) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!ca_file.empty()) {
    grpc::SslCredentialsOptions tls;
    ZEROD_ASSIGN_OR_RETURN(tls.pem_root_certs, read_small_file(ca_file, "TLS certificate file"));
    creds = grpc::SslCredentials(tls);
  }
  return grpc::CreateChannel(address, creds);
}

}  // namespace zerod
