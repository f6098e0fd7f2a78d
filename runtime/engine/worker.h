// zero-worker as a library call: parses the command line, runs the job,
// reports, and returns the exit status (0 ok, 2 bad input, 1 run failure).
#pragma once

#include <ostream>

namespace zerod {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

int run_worker(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
