// The CPU vector instruction sets the optimizer kernels are built for, and
// which of them this machine runs. Each kernel is compiled once per set and
// chosen at run time, so one binary uses AVX-512 where it exists and still
// runs where it does not.
#pragma once

#include <vector>

namespace zerod {

enum class CpuIsa { kScalar, kAvx2, kAvx512, kAvx512Vbmi };

const char* cpu_isa_name(CpuIsa isa);
// Every set this CPU (and its OS) supports and this build carries, widest last.
const std::vector<CpuIsa>& supported_cpu_isas();
// The widest of them: what the optimizers use.
CpuIsa best_cpu_isa();

}  // namespace zerod
