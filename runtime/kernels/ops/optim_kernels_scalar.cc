// The optimizer kernels built for scalar; see optim_kernels.inc.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/kernels/ops/optim_kernels.h"

namespace zerod {
namespace {
#include "runtime/kernels/cpu/simd_scalar.inc"
#include "runtime/kernels/ops/optim_kernels.inc"
}  // namespace

const OptimKernels& scalar_optim_kernels() { return kernel_table<ScalarV>(); }

}  // namespace zerod
