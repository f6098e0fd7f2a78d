// The optimizer kernels built for avx2; see optim_kernels.inc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/kernels/ops/optim_kernels.h"

namespace zerod {
namespace {
#include "runtime/kernels/cpu/simd_avx2.inc"
#include "runtime/kernels/cpu/simd_scalar.inc"
#include "runtime/kernels/ops/optim_kernels.inc"
}  // namespace

const OptimKernels& avx2_optim_kernels() { return kernel_table<Avx2V>(); }

}  // namespace zerod
