// zerod as a library call: parses the command line, serves the Coordinator
// and WorkerControl services until SIGINT or SIGTERM, and returns the exit
// status (0, or 2 for bad options). Jobs keep running when zerod stops; the
// next zerod on the same state directory takes them over.
#pragma once

#include <ostream>

namespace zerod {

int run_zerod(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
