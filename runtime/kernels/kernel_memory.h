// What a kernel table's work needs of memory, known without a device: the
// tables answer from it, and a memory plan (runtime/core/memory_plan.h)
// reads it for a device that need not be here.
#pragma once

#include <cstdint>

#include "runtime/core/memory_plan.h"

namespace zerod {

enum class KernelBackend : uint8_t { kCpu, kCuda };

struct KernelMemory {
  KernelBackend backend = KernelBackend::kCpu;
  int cpu_threads = 1;  // the CPU's attention backward keeps a scratch per thread

  // Whether attention keeps its [B, NH, T, T] probabilities for the
  // backward (the CPU's), or a statistic per row (the CUDA table's).
  bool attention_keeps_probabilities() const { return backend == KernelBackend::kCpu; }
  // Floats of attention's scratch for B sequences of T, NH heads.
  int64_t attention_scratch_floats(int B, int T, int NH) const;
  // The buffers a table makes for itself, on plan's device (the CUDA
  // table's cuBLAS workspace, column partials and 8-bit maps).
  void plan_table(MemoryPlan& plan) const;

  // cuBLAS's workspace, which the CUDA table hands it.
  static constexpr uint64_t kCudaBlasWorkspace = uint64_t{32} << 20;
};

// The CPU table's, at this process's OpenMP threads.
KernelMemory cpu_kernel_memory();

}  // namespace zerod
