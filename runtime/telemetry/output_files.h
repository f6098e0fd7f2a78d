// What the monitors' writers share: their directory, made where missing,
// and a failed file operation as a status naming the file and errno's reason.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace zerod {

absl::Status create_output_dir(const std::string& dir);
absl::Status file_error(const std::string& what, const std::string& path);

}  // namespace zerod
