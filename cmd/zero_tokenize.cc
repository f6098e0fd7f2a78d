// zero-tokenize: `zeroctl tokenize`, a program of its own because
// libsentencepiece cannot share a process with gRPC's protobuf
// (runtime/CMakeLists.txt says why).
#include <iostream>

#include "runtime/tokenize/tokenize_command.h"

int main(int argc, char** argv) { return zerod::run_tokenize(argc, argv, std::cout, std::cerr); }
