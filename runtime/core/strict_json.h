// JSON text from outside (configs, requests, manifests, file headers),
// parsed so that what nlohmann accepts silently is refused: a key given
// twice in one object (nlohmann keeps the last), which would let two
// readers of one file see different values.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"

namespace zerod {

// InvalidArgument naming `what` (a file, a request) and the error: the
// parser's, with its byte position, or the duplicate key and the object it
// is in ("duplicate key 'stage' in zero_optimization").
absl::StatusOr<nlohmann::json> parse_strict_json(const std::string& text, const std::string& what);

}  // namespace zerod
