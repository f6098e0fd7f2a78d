// zeroctl: the command-line client of zerod. Everything it does lives in runtime/coordinator.
#include <iostream>

#include "runtime/coordinator/zeroctl.h"

int main(int argc, char** argv) { return zerod::run_zeroctl(argc, argv, std::cout, std::cerr); }
