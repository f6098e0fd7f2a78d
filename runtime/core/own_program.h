// The path of the program this process runs (/proc/self/exe), for
// re-executing it or finding what is installed beside it.
#pragma once

#include <optional>
#include <string>

namespace zerod {

// nullopt where /proc cannot say, or the file was replaced or removed since
// the process started (the kernel then names it "... (deleted)").
std::optional<std::string> own_program();

// A program installed beside this one (zero-worker beside zerod), or
// `name` alone, for the PATH to find, where own_program() cannot say.
std::string program_beside(const std::string& name);

}  // namespace zerod
