// zeroctl: the command-line client of zerod (runtime/coordinator), and
// `zeroctl estimate` (runtime/engine) and `zeroctl tokenize` (zero-tokenize,
// run in its place), which need no zerod.
#include "runtime/coordinator/zeroctl.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>

#include "runtime/core/own_program.h"
#include "runtime/engine/estimate.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "estimate") {
    return zerod::run_estimate(argc - 1, argv + 1, std::cout, std::cerr);
  }
  if (argc > 1 && std::string_view(argv[1]) == "tokenize") {
    const std::string program = zerod::program_beside("zero-tokenize");
    char name[] = "zeroctl tokenize";  // what its usage names
    argv[1] = name;
    execvp(program.c_str(), argv + 1);
    std::cerr << "zeroctl tokenize: cannot run " << program << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  return zerod::run_zeroctl(argc, argv, std::cout, std::cerr);
}
