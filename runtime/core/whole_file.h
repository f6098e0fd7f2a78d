// Small files read whole: configs, manifests, tokens, certificates.
#pragma once

#include <optional>
#include <string>

namespace zerod {

// The file's bytes, or nullopt when it cannot be opened.
std::optional<std::string> read_whole_file(const std::string& path);

}  // namespace zerod
