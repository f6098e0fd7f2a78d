// The bearer token every RPC carries ("authorization: Bearer <token>"), and
// the TLS settings of a channel. The token itself never reaches a log: errors
// name where it came from, not what it is.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "runtime/core/status.h"

namespace zerod {

// The token from `file` when given, else from the environment variable
// ZEROD_TOKEN. Surrounding whitespace is dropped; an empty token is refused.
absl::StatusOr<std::string> load_token(const std::string& file);

// Whether an Authorization header's value is "Bearer <token>", compared in
// time that does not depend on the token's bytes.
bool bearer_matches(std::string_view value, const std::string& token);

// OK when the call's metadata carries `token`; UNAUTHENTICATED otherwise.
grpc::Status check_token(const grpc::ServerContextBase& ctx, const std::string& token);

// Adds the token to an outgoing call.
void add_token(grpc::ClientContext& ctx, const std::string& token);

// A channel to `address`: TLS when `ca_file` names the PEM certificates to
// trust, plaintext otherwise.
absl::StatusOr<std::shared_ptr<grpc::Channel>> open_channel(const std::string& address, const std::string& ca_file);

// The whole of a small file (a token, a certificate).
absl::StatusOr<std::string> read_small_file(const std::string& path, const std::string& what);

}  // namespace zerod
