// A kernel table that times each op of another on its stream, by the op's
// name, for the config's wall_clock_breakdown (runtime/core/profiler.h).
#pragma once

#include <memory>

#include "runtime/core/profiler.h"
#include "runtime/kernels/kernels.h"

namespace zerod {

// `inner` timed into `profiler`, which must outlive the table.
std::unique_ptr<Kernels> profiled_kernels(std::unique_ptr<Kernels> inner, Profiler& profiler);

}  // namespace zerod
