#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/lt_gemm.h"

namespace zerod::cuda {
namespace {

void check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "zerod: cuBLASLt %s failed: %s\n", what, cublasGetStatusString(st));
  std::abort();
}

cudaDataType_t cuda_type(DType t) {
  return t == DType::kBF16 ? CUDA_R_16BF : t == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// The largest power of two up to 256 that divides p's address: what the
// heuristic may assume of that operand.
unsigned alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  unsigned align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// The alignments of A, B and C (= D), nine bits each.
unsigned alignments(const ColMajorGemm& g) { return alignment(g.A) | alignment(g.B) << 9 | alignment(g.C) << 18; }

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, T v) {
  check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v), "cublasLtMatmulDescSetAttribute");
}

cublasLtMatrixLayout_t layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l;
  check(cublasLtMatrixLayoutCreate(&l, cuda_type(t), rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "batch count");
    check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
          "batch stride");
  }
  return l;
}

cublasLtEpilogue_t epilogue(const ColMajorGemm& g) {
  switch (g.epilogue) {
    case GemmEpilogue::kGeluAux:
      return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kGeluGrad:
      return CUBLASLT_EPILOGUE_DGELU;  // no bias gradient: the table's own sums it (ops/matmul.cuh)
    case GemmEpilogue::kNone:
      break;
  }
  return g.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

LtGemm::~LtGemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (handle_) cublasLtDestroy(handle_);
}

absl::Status LtGemm::init(void* workspace, size_t bytes) {
  const cublasStatus_t st = cublasLtCreate(&handle_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublasGetStatusString(st)));
  }
  workspace_ = workspace;
  workspace_bytes_ = bytes;
  return absl::OkStatus();
}

LtGemm::Plan& LtGemm::plan(const ColMajorGemm& g, DType ab, DType cd) {
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldc,
                g.batch,
                g.stride_a,
                g.stride_b,
                g.stride_c,
                int(ab),
                int(cd),
                g.bias != nullptr,
                alignment(g.bias),
                alignments(g),
                int(g.epilogue),
                g.aux_ld,
                alignment(g.aux)};
  auto [it, fresh] = plans_.try_emplace(key);
  Plan& p = it->second;
  if (!fresh) return p;
  // fp32 operands stay fp32 products (no tf32): the fp32 job's numbers.
  check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  set<int32_t>(p.op, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set<int32_t>(p.op, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set<int32_t>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue(g));
  // The heuristic reads the bias's and the aux matrix's alignment from
  // their pointers' values.
  if (g.bias) set<const void*>(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.epilogue != GemmEpilogue::kNone) {
    set<const void*>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set<int64_t>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  }
  // Stored (column-major) shapes: op(A) is m x k, op(B) k x n.
  p.a = layout(ab, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
  p.b = layout(ab, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  p.c = layout(cd, g.m, g.n, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = workspace_bytes_;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "workspace preference");
  const uint32_t align[4] = {alignment(g.A), alignment(g.B), alignment(g.C), alignment(g.C)};
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    check(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &align[i], sizeof align[i]), "alignment preference");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.heuristic = st;
  p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

void LtGemm::enqueue(cudaStream_t s, const ColMajorGemm& g, Plan& p) {
  if (g.bias) set<const void*>(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.epilogue != GemmEpilogue::kNone) set<const void*>(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
  check(cublasLtMatmul(handle_, p.op, &g.alpha, g.A, p.a, g.B, p.b, &g.beta, g.C, p.c, g.C, p.c, &p.algo, workspace_,
                       workspace_bytes_, s),
        "cublasLtMatmul");
  launch_count().fetch_add(1, std::memory_order_relaxed);
}

bool LtGemm::try_run(cudaStream_t s, const ColMajorGemm& g, DType ab, DType cd) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return true;
  // cuBLASLt's own rule for a GELU aux matrix (cublasLt.h): ld a multiple
  // of 8, one unbatched product.
  if (g.aux_ld % 8 != 0 || g.aux_ld < g.m || g.batch != 1) return false;
  Plan& p = plan(g, ab, cd);
  if (!p.found) return false;
  enqueue(s, g, p);
  return true;
}

void LtGemm::run(cudaStream_t s, const ColMajorGemm& g, DType ab, DType cd) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return;  // an empty vocabulary slice (gemm_args.h)
  Plan& p = plan(g, ab, cd);
  if (!p.found) {
    std::fprintf(stderr,
                 "zerod: cuBLASLt has no algorithm (%s) for %c%c m %lld n %lld k %lld (lda %lld ldb %lld ldc %lld, "
                 "batch %lld, %s x %s -> %s%s)\n",
                 cublasGetStatusName(p.heuristic), g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N',
                 static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                 static_cast<long long>(g.lda), static_cast<long long>(g.ldb), static_cast<long long>(g.ldc),
                 static_cast<long long>(g.batch), dtype_name(ab), dtype_name(ab), dtype_name(cd),
                 g.bias ? ", bias" : "");
    std::abort();
  }
  enqueue(s, g, p);
}

}  // namespace zerod::cuda
