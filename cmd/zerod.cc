// zerod: the coordinator daemon. Everything it does lives in runtime/coordinator.
#include <iostream>

#include "runtime/coordinator/daemon.h"

int main(int argc, char** argv) { return zerod::run_zerod(argc, argv, std::cout, std::cerr); }
