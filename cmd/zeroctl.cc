// zeroctl: the command-line client of zerod (runtime/coordinator), and
// `zeroctl estimate`, which needs no zerod but the trainer's memory plan
// (runtime/engine).
#include "runtime/coordinator/zeroctl.h"

#include <iostream>
#include <string_view>

#include "runtime/engine/estimate.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "estimate") {
    return zerod::run_estimate(argc - 1, argv + 1, std::cout, std::cerr);
  }
  return zerod::run_zeroctl(argc, argv, std::cout, std::cerr);
}
