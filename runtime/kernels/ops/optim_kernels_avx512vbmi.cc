// The optimizer kernels built for avx512 with VBMI; see optim_kernels.inc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/kernels/ops/optim_kernels.h"

namespace zerod {
namespace {
#include "runtime/kernels/cpu/simd_avx512.inc"
#include "runtime/kernels/cpu/simd_avx512vbmi.inc"
#include "runtime/kernels/cpu/simd_scalar.inc"
#include "runtime/kernels/ops/optim_kernels.inc"
}  // namespace

const OptimKernels& avx512vbmi_optim_kernels() { return kernel_table<Avx512VbmiV>(); }

}  // namespace zerod
