// zero-worker: one training process. Everything it does lives in the runtime.
#include <iostream>

#include "runtime/engine/worker.h"

int main(int argc, char** argv) { return zerod::run_worker(argc, argv, std::cout, std::cerr); }
