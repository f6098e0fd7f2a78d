// The CUDA kernel table: cuBLAS (fp32, no TF32) for the matrix products,
// attention's included (attention_plan.h), and for the rest the bodies of
// *_body.h, which tests/test_cuda_bodies.cc also runs on the CPU: one
// thread per element, row or column chunk, one warp per row of attention's
// scores, one block per row of logits or chunk of a sum of squares. No
// reduction uses atomics, so a run gives the same bits every time.
#include <cublas_v2.h>

#include <algorithm>
#include <cassert>
#include <functional>

#include "absl/strings/str_cat.h"
#include "runtime/core/cuda_device.h"
#include "runtime/kernels/cuda/attention_body.h"
#include "runtime/kernels/cuda/attention_plan.h"
#include "runtime/kernels/cuda/cuda_table.h"
#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/nf4_body.h"
#include "runtime/kernels/cuda/optim_body.h"
#include "runtime/kernels/cuda/pointwise_body.h"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/cuda/rows_body.h"

namespace zerod {
namespace {

using cuda::launch_block_rows;
using cuda::launch_each;
using cuda::launch_warp_rows;

absl::Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(st), ": ", cublasGetStatusString(st)));
}

// 8-bit Adam: one block of kQuantBlock threads per quantization block; the
// block's new absmax is a max (exact in any order), then each thread
// requantizes its own element.
__global__ void adam8bit_kernel(Adam8bitTensor t, AdamStep k, const QuantMap* maps) {
  static_assert(kQuantBlock == 256);
  __shared__ float m_max[kQuantBlock], v_max[kQuantBlock];
  const QuantMap& qm = maps[0];
  const QuantMap& qv = maps[1];
  const int64_t blk = blockIdx.x, i = blk * kQuantBlock + threadIdx.x;
  float m = 0.0f, v = 0.0f;
  if (i < t.n) cuda::adam8bit_at(i, t, k, qm, qv, m, v);
  m_max[threadIdx.x] = fabsf(m);
  v_max[threadIdx.x] = v;
  __syncthreads();
  for (int half = kQuantBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      m_max[threadIdx.x] = fmaxf(m_max[threadIdx.x], m_max[threadIdx.x + half]);
      v_max[threadIdx.x] = fmaxf(v_max[threadIdx.x], v_max[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const float m_abs = m_max[0], v_abs = v_max[0];
  if (i < t.n) {
    t.m[i] = cuda::quantize_code(qm, m * (2 * cuda::inverse_or_zero(m_abs)));
    t.v[i] = cuda::quantize_code(qv, v * (2 * cuda::inverse_or_zero(v_abs)));
  }
  if (threadIdx.x == 0) {
    t.m_absmax[blk] = m_abs;
    t.v_absmax[blk] = v_abs;
  }
}

// Attention's executor (attention_plan.h): the table's cuBLAS gemm, and
// one warp per row of scores. (At namespace scope: nvcc allows no
// extended lambda in a class's private parts.)
struct AttentionExec {
  std::function<void(const cuda::ColMajorGemm&)> gemm;
  cudaStream_t s;

  void softmax_rows(float* S, float* lse, int T, int64_t rows) {
    launch_warp_rows(s, rows, "attention_softmax", [=] __device__(int64_t r, int lane) {
      float* row = S + r * T;
      const int64_t t = r % T;
      const float mx = cuda::warp_reduce(cuda::softmax_row_max(row, t, lane, 32), cuda::Max());
      const float sum = cuda::warp_reduce(cuda::softmax_row_sum(row, t, mx, lane, 32), cuda::Sum());
      cuda::softmax_row_write(row, t, T, mx, 1.0f / sum, lane, 32);
      if (lane == 0) lse[r] = mx + logf(sum);
    });
  }
  void backward_rows(float* P, float* dP, const float* lse, int T, int64_t rows) {
    launch_warp_rows(s, rows, "attention_backward_rows", [=] __device__(int64_t r, int lane) {
      const int64_t t = r % T;
      const float D =
          cuda::warp_reduce(cuda::probabilities_row(P + r * T, dP + r * T, t, T, lse[r], lane, 32), cuda::Sum());
      cuda::softmax_backward_row(P + r * T, dP + r * T, t, T, D, lane, 32);
    });
  }
};

class CudaKernels : public Kernels {
 public:
  explicit CudaKernels(Device& d) : dev_(d) {}
  ~CudaKernels() override {
    if (blas_) cublasDestroy(blas_);
  }

  absl::Status init() {
    ZEROD_RETURN_IF_ERROR(cublas_status(cublasCreate(&blas_), "cublasCreate"));
    ZEROD_RETURN_IF_ERROR(cublas_status(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    // cuBLAS's own workspace, so that it is accounted and a run repeats its bits.
    ZEROD_ASSIGN_OR_RETURN(blas_workspace_, dev_.allocate(KernelMemory::kCudaBlasWorkspace, Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(partials_, dev_.allocate(cuda::kColumnPartials * sizeof(float), Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(maps_, dev_.allocate(2 * sizeof(QuantMap), Category::kWorkspace));
    const QuantMap maps[2] = {signed_dynamic_map(), unsigned_dynamic_map()};
    Stream& s = dev_.compute_stream();
    dev_.copy(s, maps_.data(), maps, sizeof maps);
    return dev_.synchronize(s);
  }

  // bf16 and fp16 values are exact in the fast modes' inputs, so those
  // products are the fp32 ones, on tensor cores. The other products of a
  // 16-bit model take fp32 values: tf32 tensor cores, fp32 accumulation.
  void set_forward_operands(DType t) override {
    forward_compute_ = t == DType::kBF16  ? CUBLAS_COMPUTE_32F_FAST_16BF
                       : t == DType::kF16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                          : CUBLAS_COMPUTE_32F;
    other_compute_ = t == DType::kF32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  void matmul_forward(Stream& s, float* out, const float* inp, const float* w, const float* bias, int64_t N, int C,
                      int OC) override {
    float beta = 0.0f;
    if (bias) {
      launch_each(cs(s), N * OC, "matmul_bias", [=] __device__(int64_t i) { out[i] = bias[i % OC]; });
      beta = 1.0f;
    }
    gemm(s, cuda::matmul_forward_gemm(out, inp, w, N, C, OC, beta), forward_compute_);
  }
  void matmul_backward(Stream& s, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                       const float* w, int64_t N, int C, int OC) override {
    if (dinp) gemm(s, cuda::matmul_dinp_gemm(dinp, dout, w, N, C, OC), other_compute_);
    if (dw) gemm(s, cuda::matmul_dw_gemm(dw, dout, inp, N, C, OC), other_compute_);
    if (!dbias) return;
    const int64_t rows = cuda::column_chunk_rows(N, OC), chunks = column_chunks(N, rows, OC, "bias_backward");
    float* partial = partials_.ptr<float>();
    launch_each(cs(s), chunks * OC, "bias_backward_partials",
                [=] __device__(int64_t j) { cuda::bias_partial_at(j, partial, dout, N, OC, rows); });
    launch_each(cs(s), OC, "bias_backward_totals",
                [=] __device__(int64_t o) { cuda::column_total(o, dbias, partial, chunks, OC); });
  }
  void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int C) override {
    launch_warp_rows(cs(s), N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
      const float* x = inp + n * C;
      const float m = cuda::warp_reduce(cuda::row_sum(x, C, lane, 32), cuda::Sum()) / C;
      const float r =
          cuda::layernorm_rstd(cuda::warp_reduce(cuda::row_squares_about(x, C, m, lane, 32), cuda::Sum()), C);
      cuda::layernorm_write(out + n * C, x, w, b, C, m, r, lane, 32);
      if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
      }
    });
  }
  void layernorm_backward(Stream& s, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N, int C) override {
    launch_warp_rows(cs(s), N, "layernorm_backward", [=] __device__(int64_t n, int lane) {
      const float *x = inp + n * C, *dy = dout + n * C;
      cuda::LayerNormRowSums sums = cuda::layernorm_backward_sums(dy, x, w, mean[n], rstd[n], C, lane, 32);
      sums.dnorm = cuda::warp_reduce(sums.dnorm, cuda::Sum());
      sums.dnorm_norm = cuda::warp_reduce(sums.dnorm_norm, cuda::Sum());
      cuda::layernorm_backward_write(dinp + n * C, dy, x, w, mean[n], rstd[n], sums, C, lane, 32);
    });
    if (!dw) return;
    const int64_t rows = cuda::column_chunk_rows(N, 2 * C),
                  chunks = column_chunks(N, rows, 2 * C, "layernorm_backward");
    float* partial = partials_.ptr<float>();
    launch_each(cs(s), chunks * C, "layernorm_backward_partials", [=] __device__(int64_t j) {
      cuda::layernorm_params_partial_at(j, partial, dout, inp, mean, rstd, N, C, rows);
    });
    launch_each(cs(s), C, "layernorm_backward_totals", [=] __device__(int64_t i) {
      cuda::column_total(i, dw, partial, chunks, 2 * C);
      cuda::column_total(i, db, partial + C, chunks, 2 * C);
    });
  }
  KernelMemory memory() const override { return {KernelBackend::kCuda}; }
  void attention_forward(Stream& s, float* out, float* lse, float* scratch, const float* qkv, int B, int T, int C,
                         int NH) override {
    AttentionExec x{[&](const cuda::ColMajorGemm& g) { gemm(s, g, other_compute_); }, cs(s)};
    cuda::attention_forward_plan(x, out, lse, scratch, qkv, B, T, C, NH, cuda::attention_chunk_heads(T, NH));
  }
  void attention_backward(Stream& s, float* dqkv, const float* dout, const float* qkv, const float* lse, float* scratch,
                          int B, int T, int C, int NH) override {
    AttentionExec x{[&](const cuda::ColMajorGemm& g) { gemm(s, g, other_compute_); }, cs(s)};
    cuda::attention_backward_plan(x, dqkv, dout, qkv, lse, scratch, B, T, C, NH, cuda::attention_chunk_heads(T, NH));
  }
  void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) override {
    launch_each(cs(s), n, "gelu_forward", [=] __device__(int64_t i) { out[i] = cuda::gelu(inp[i]); });
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout, int64_t n) override {
    launch_each(cs(s), n, "gelu_backward", [=] __device__(int64_t i) { dinp[i] = cuda::gelu_grad(inp[i], dout[i]); });
  }
  void residual_forward(Stream& s, float* out, const float* a, const float* b, int64_t n) override {
    launch_each(cs(s), n, "residual_forward", [=] __device__(int64_t i) { out[i] = a[i] + b[i]; });
  }
  void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                         int T, int C) override {
    launch_each(cs(s), int64_t(B) * T * C, "embedding_forward",
                [=] __device__(int64_t j) { cuda::embedding_forward_at(j, out, tokens, wte, wpe, T, C); });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                          int C) override {
    const int64_t N = int64_t(B) * T;
    launch_each(cs(s), C, "embedding_backward", [=] __device__(int64_t i) {
      cuda::embedding_backward_column(int(i), dwte, dwpe, dout, tokens, N, T, C);
    });
  }
  void classifier_logits(Stream& s, float* logits, const float* inp, int64_t inp_stride, const float* wte,
                         int64_t rows, int C, int V) override {
    gemm(s, cuda::logits_gemm(logits, inp, inp_stride, wte, rows, C, V), forward_compute_);
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    const int C = a.C, V = a.V;
    for (int64_t r0 = 0; r0 < a.N; r0 += a.chunk_rows) {
      const int64_t rows = std::min(a.chunk_rows, a.N - r0);
      classifier_logits(s, a.logits, a.inp + r0 * C, C, a.wte, rows, C, V);
      round_to(s, a.act, a.logits, rows * V);
      float* logits = a.logits;
      double* losses = a.losses + r0;
      const int32_t* targets = a.targets + r0;
      const float dloss = a.dloss;
      launch_block_rows(cs(s), rows, "softmax_cross_entropy", [=] __device__(int64_t r, int lane, int lanes) {
        float* z = logits + r * V;
        const int target = targets[r];
        assert(target >= 0 && target < V);
        const float z_target = z[target];  // read before any lane overwrites it
        const float mx = cuda::block_reduce(cuda::logits_row_max(z, V, lane, lanes), cuda::Max());
        const double sum = cuda::block_reduce(cuda::logits_row_sum(z, V, mx, lane, lanes), cuda::Sum());
        if (lane == 0) losses[r] = cuda::cross_entropy_loss(z_target, mx, sum);
        if (dloss != 0.0f) cuda::softmax_grad_row(z, V, target, mx, sum, dloss, lane, lanes);
      });
      gemm(s, cuda::head_dinp_gemm(a.dinp + r0 * C, a.logits, a.wte, rows, C, V), other_compute_);
      if (a.dwte) gemm(s, cuda::head_dwte_gemm(a.dwte, a.logits, a.inp + r0 * C, rows, C, V), other_compute_);
    }
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override {
    if (t == DType::kF32) return;
    launch_each(cs(s), n, "round_to", [=] __device__(int64_t i) { x[i] = cuda::round_f32(t, x[i]); });
  }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    launch_each(cs(s), n, "convert_from_f32",
                [=] __device__(int64_t i) { cuda::store_f32(dst, to, i, src[i]); });
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    launch_each(cs(s), n, "convert_to_f32", [=] __device__(int64_t i) { dst[i] = cuda::load_f32(src, from, i); });
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override {
    launch_each(cs(s), 1, "sum", [=] __device__(int64_t) {
      double total = 0.0;
      for (int64_t i = 0; i < n; ++i) total += x[i];
      *out = total;
    });
  }
  // One block per chunk, a thread per lane, then one block for the
  // partials. The chunks' partial sums share one buffer: the table serves
  // one stream at a time (the compute stream).
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    const int64_t chunks = (n + cpu::kSquaresChunk - 1) / cpu::kSquaresChunk;
    if (chunks > kMaxChunks) {
      std::fprintf(stderr, "zerod: sum_squares of %lld elements exceeds the table's %lld chunks\n",
                   static_cast<long long>(n), static_cast<long long>(kMaxChunks));
      std::abort();
    }
    double* partial = partials_.ptr<double>();
    static_assert(cpu::kSquaresLanes == cuda::kBlockThreads);
    launch_block_rows(cs(s), chunks, "sum_squares_chunks", [=] __device__(int64_t c, int lane, int) {
      const double p = cuda::block_tree_reduce<cpu::kSquaresLanes>(cuda::squares_lane(x, n, c, lane), cuda::Sum());
      if (lane == 0) partial[c] = p;
    });
    launch_block_rows(cs(s), 1, "sum_squares_total", [=] __device__(int64_t, int lane, int) {
      const double total =
          cuda::block_tree_reduce<cpu::kSquaresLanes>(cuda::squares_partials_lane(partial, chunks, lane), cuda::Sum());
      if (lane == 0) *out = total;
    });
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    launch_each(cs(s), n, "add", [=] __device__(int64_t i) { dst[i] = dst[i] + src[i]; });
  }
  void scale(Stream& s, float* x, float a, int64_t n) override {
    launch_each(cs(s), n, "scale", [=] __device__(int64_t i) { x[i] = x[i] * a; });
  }
  void dropout(Stream& s, float* y, const float* x, int64_t n, float p, uint64_t seed) override {
    launch_each(cs(s), n, "dropout", [=] __device__(int64_t i) { y[i] = cuda::dropout_at(x[i], p, seed, i); });
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override {
    launch_each(cs(s), t.n, "adam", [=] __device__(int64_t i) { cuda::adam_at(i, t, step); });
  }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    if (t.n <= 0) return;
    adam8bit_kernel<<<static_cast<unsigned>(quant_blocks(t.n)), kQuantBlock, 0, cs(s)>>>(
        t, step, maps_.ptr<const QuantMap>());
    cuda::check_launch(cs(s), "adam8bit");
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, float* out) override {
    cuda::Nf4Values v;
    std::copy(nf4_values().begin(), nf4_values().end(), v.v);
    const QuantMap* dyn = maps_.ptr<const QuantMap>();  // [0]: the signed map
    launch_each(cs(s), t.n, "nf4_dequantize", [=] __device__(int64_t i) { out[i] = cuda::nf4_at(i, t, v, *dyn); });
  }

 private:
  // Sums of squares of up to 2^32 elements: their chunks' partials share
  // the column sums' buffer.
  static constexpr int64_t kMaxChunks = int64_t{1} << 16;
  static_assert(kMaxChunks * sizeof(double) <= cuda::kColumnPartials * sizeof(float));

  static cudaStream_t cs(Stream& s) { return cuda_stream(s); }

  // Chunks of a column sum of N rows over `cols` partials each; a table
  // too small for them is a bug of the sizes, so it aborts.
  static int64_t column_chunks(int64_t N, int64_t rows, int64_t cols, const char* what) {
    const int64_t chunks = (N + rows - 1) / rows;
    if (chunks * cols > cuda::kColumnPartials) {
      std::fprintf(stderr, "zerod: %s of %lld columns exceeds the table's %lld partial sums\n", what,
                   static_cast<long long>(cols), static_cast<long long>(cuda::kColumnPartials));
      std::abort();
    }
    return chunks;
  }

  // fp32 in and out; `compute` other than CUBLAS_COMPUTE_32F lets cuBLAS
  // round the inputs to a 16-bit type or tf32.
  void gemm(Stream& s, const cuda::ColMajorGemm& g, cublasComputeType_t compute = CUBLAS_COMPUTE_32F) {
    if (g.m == 0 || g.n == 0) return;
    cudaStream_t stream = cs(s);
    if (stream != blas_stream_) {
      // cublasSetStream drops a user workspace, so it is set again after.
      check(cublasSetStream(blas_, stream), "cublasSetStream");
      check(cublasSetWorkspace(blas_, blas_workspace_.data(), blas_workspace_.bytes()), "cublasSetWorkspace");
      blas_stream_ = stream;
    }
    const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (compute != CUBLAS_COMPUTE_32F) {
      check(cublasGemmStridedBatchedEx_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, g.A, CUDA_R_32F, g.lda, g.stride_a,
                                          g.B, CUDA_R_32F, g.ldb, g.stride_b, &g.beta, g.C, CUDA_R_32F, g.ldc,
                                          g.stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
      cuda::check_launch(stream, "cublasGemmStridedBatchedEx");
      return;
    }
    if (g.batch == 1) {
      check(cublasSgemm_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, g.A, g.lda, g.B, g.ldb, &g.beta, g.C, g.ldc),
            "cublasSgemm");
      cuda::check_launch(stream, "cublasSgemm");
      return;
    }
    check(cublasSgemmStridedBatched_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, g.A, g.lda, g.stride_a, g.B, g.ldb,
                                       g.stride_b, &g.beta, g.C, g.ldc, g.stride_c, g.batch),
          "cublasSgemmStridedBatched");
    cuda::check_launch(stream, "cublasSgemmStridedBatched");
  }
  static void check(cublasStatus_t st, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    std::fprintf(stderr, "zerod: %s failed: %s\n", what, cublasGetStatusString(st));
    std::abort();
  }

  Device& dev_;
  cublasHandle_t blas_ = nullptr;
  cudaStream_t blas_stream_ = nullptr;
  cublasComputeType_t forward_compute_ = CUBLAS_COMPUTE_32F;  // set_forward_operands
  cublasComputeType_t other_compute_ = CUBLAS_COMPUTE_32F;    // set_forward_operands
  Buffer blas_workspace_, partials_, maps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernels>> cuda_kernels(Device& device) {
  if (!dynamic_cast<CudaDevice*>(&device)) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA kernel table needs a CUDA device, not ", device.name()));
  }
  auto k = std::make_unique<CudaKernels>(device);
  ZEROD_RETURN_IF_ERROR(k->init());
  return std::unique_ptr<Kernels>(std::move(k));
}

}  // namespace zerod
