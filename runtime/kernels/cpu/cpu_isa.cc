#include "runtime/kernels/cpu/cpu_isa.h"

#if defined(ZEROD_X86_KERNELS)
#include <cpuid.h>
#endif

namespace zerod {
namespace {

#if defined(ZEROD_X86_KERNELS)
// CPUID leaf 1: clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Vbmi: return "avx512vbmi";
  }
  return "?";
}

const std::vector<CpuIsa>& supported_cpu_isas() {
  static const std::vector<CpuIsa> isas = [] {
    std::vector<CpuIsa> v{CpuIsa::kScalar};
#if defined(ZEROD_X86_KERNELS)
    // libgcc's checks include the OS saving the wider registers (XCR0).
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (avx2) v.push_back(CpuIsa::kAvx2);
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      v.push_back(CpuIsa::kAvx512);
      if (__builtin_cpu_supports("avx512vbmi")) v.push_back(CpuIsa::kAvx512Vbmi);
    }
#endif
    return v;
  }();
  return isas;
}

CpuIsa best_cpu_isa() { return supported_cpu_isas().back(); }

}  // namespace zerod
