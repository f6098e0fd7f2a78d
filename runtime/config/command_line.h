// Command-line parsing shared by zero-worker, zerod and zeroctl (CLI11).
#pragma once

#include <optional>
#include <ostream>

#include <CLI/CLI.hpp>

namespace zerod {

// Runs `parse` (app.parse plus any checks that throw CLI11 errors). Returns
// the exit status to leave with now, 0 after printing the help or 2 after a
// parse error, or nullopt to go on.
template <typename Parse>
std::optional<int> parse_command_line(const CLI::App& app, const char* program, std::ostream& out, std::ostream& err,
                                      Parse parse) {
  try {
    parse();
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << program << ": error: " << e.what() << "\n" << app.help();
    return 2;
  }
  return std::nullopt;
}

}  // namespace zerod
