// What a kernel table's work needs of memory, known without a device: the
// tables answer from it, and a memory plan (runtime/core/memory_plan.h)
// reads it for a device that need not be here.
#pragma once

#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/core/memory_plan.h"

namespace zerod {

enum class KernelBackend : uint8_t { kCpu, kCuda };

struct KernelMemory {
  KernelBackend backend = KernelBackend::kCpu;
  int cpu_threads = 1;  // the CPU's attention keeps a scratch per thread

  // The type of the table's operands (kernels.h) for a job computing in
  // `precision`: the CPU's fp32, the CUDA table's the precision itself.
  DType operand_type(DType precision) const { return backend == KernelBackend::kCpu ? DType::kF32 : precision; }
  // Floats attention keeps a query row for the backward: the CPU's max and
  // reciprocal sum (its bits), the CUDA table's log-sum-exp.
  int attention_row_stats() const { return backend == KernelBackend::kCpu ? 2 : 1; }
  // Floats of attention's scratch for B sequences of T, width C in NH
  // heads, with operands of type `operands`.
  int64_t attention_scratch_floats(int B, int T, int C, int NH, DType operands) const;
  // The LM head computes logits a chunk of rows at a time: rows of a chunk
  // for N rows of V logits, and elements from one row to the next. The
  // CPU's chunk is about 32 MiB, fixing the order in which it sums wte's
  // gradient; the GPU's a 2^26-element chunk, large enough for products
  // near their peak, and at least 1024 rows (Llama 3's and Qwen2's
  // vocabularies), its rows a multiple of 64 elements apart (whole
  // 16-byte vectors, 128-byte aligned).
  int64_t logits_rows(int V, int64_t N) const;
  int64_t logits_stride(int V) const;
  // The buffers a table makes for itself on its device, by TableBuffers:
  // the CUDA table's cuBLAS workspace, column partials and 8-bit maps
  // (none for the CPU's).
  enum TableBuffers { kBlasWorkspace, kColumnPartials, kQuantMaps };
  std::vector<BufferSpec> table_buffers() const;

  // cuBLAS's workspace, which the CUDA table hands it.
  static constexpr uint64_t kCudaBlasWorkspace = uint64_t{32} << 20;
};

// The CPU table's, at this process's OpenMP threads.
KernelMemory cpu_kernel_memory();

}  // namespace zerod
