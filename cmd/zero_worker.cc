// zero-worker: one training process. Everything it does lives in the runtime;
// with the control plane built, it also answers to zerod when launched by it.
#include <iostream>

#include "runtime/kernels/cpu/threads.h"

#ifdef ZEROD_WITH_GRPC
#include "runtime/coordinator/worker_agent.h"
#else
#include "runtime/engine/worker.h"
#endif

int main(int argc, char** argv) {
  zerod::reexec_with_short_spin_waits(argv);
#ifdef ZEROD_WITH_GRPC
  return zerod::run_supervised_worker(argc, argv, std::cout, std::cerr);
#else
  return zerod::run_worker(argc, argv, std::cout, std::cerr);
#endif
}
