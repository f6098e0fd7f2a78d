// The CPU device's kernel table (runtime/kernels/kernels.h).
#pragma once

#include <memory>

#include "runtime/kernels/kernels.h"

namespace zerod {

// Its streams must be CpuStreams.
std::unique_ptr<Kernels> cpu_kernels();

}  // namespace zerod
