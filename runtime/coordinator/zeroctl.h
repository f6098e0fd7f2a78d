// zeroctl as a library call: the command-line client of zerod. Exit status:
// 0 success (for `submit --wait`: the job SUCCEEDED), 1 failure (the job
// failed or was cancelled, zerod unreachable), 2 bad input (options, config,
// unknown job, a refused token).
#pragma once

#include <ostream>

namespace zerod {

int run_zeroctl(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
