// The CPU device's kernel table (runtime/kernels/kernels.h).
#pragma once

#include <memory>

#include "runtime/kernels/kernels.h"

namespace zerod {

// Its streams must be CpuStreams; the optimizer kernels are those of `isa`.
std::unique_ptr<Kernels> cpu_kernels(CpuIsa isa = best_cpu_isa());

}  // namespace zerod
