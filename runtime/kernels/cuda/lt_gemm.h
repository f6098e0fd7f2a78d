// The CUDA table's matrix products of operands through cuBLASLt: A and B
// of the operand type (bf16, fp16 or fp32), C and D of it or fp32 (the
// weight gradients, which accumulate; the logits a caller reads), fp32
// accumulation and scaling, the bias, a GELU or its gradient done by the
// epilogue (gemm_args.h's GemmEpilogue). For each shape the heuristic's
// first algorithm is found once and kept (or its refusal); the algorithms
// for a shape depend on its pointers' alignment, which is part of the key.
// cuBLAS's own guarantee makes a run repeat its bits on the same GPU: no
// algorithm it picks accumulates in an order that varies between runs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "absl/status/status.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/cuda/gemm_args.h"

namespace zerod::cuda {

class LtGemm {
 public:
  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm();

  // `workspace` (device memory of `bytes`) is the algorithms' scratch; the
  // products on one stream at a time share it.
  absl::Status init(void* workspace, size_t bytes);
  // C = alpha op(A) op(B) + beta C (+ bias, then g.epilogue) on stream s;
  // A and B of type ab, C (bias, aux) of type cd. An empty product (m, n
  // or k 0) leaves C as it is. Aborts on a product cuBLASLt refuses: a
  // bug of the table's shapes.
  void run(cudaStream_t s, const ColMajorGemm& g, DType ab, DType cd);
  // The same for a product with a GELU epilogue, which cuBLASLt offers
  // for some types, shapes and alignments only: false (nothing enqueued)
  // where it has no algorithm for it, and the caller runs the GELU apart.
  bool try_run(cudaStream_t s, const ColMajorGemm& g, DType ab, DType cd);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    cublasStatus_t heuristic = CUBLAS_STATUS_SUCCESS;  // its answer, kept either way
    bool found = false;
  };
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int, int, bool, unsigned, unsigned, int, int64_t, unsigned>;
  Plan& plan(const ColMajorGemm& g, DType ab, DType cd);
  void enqueue(cudaStream_t s, const ColMajorGemm& g, Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace zerod::cuda
