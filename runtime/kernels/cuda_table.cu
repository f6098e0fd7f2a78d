// The CUDA kernel table: a thin dispatch to each op's launches
// (ops/<op>.cuh, their math and bodies in ops/<op>.h), which this one
// translation unit includes, with what they share: the cuBLAS and cuBLASLt
// handles and their workspace, the column sums' partials, the 8-bit maps
// on the device, and cuDNN's fused attention where the build has cuDNN
// and cuDNN runs the shape (cuda/cudnn_sdpa.h). Its operands (kernels.h)
// are of the job's precision. No reduction uses atomics, so a run gives
// the same bits every time.
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/core/cuda_device.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/lt_gemm.h"
#include "runtime/kernels/cuda_table.h"
#include "runtime/kernels/ops/adam.cuh"
#include "runtime/kernels/ops/attention.cuh"
#include "runtime/kernels/ops/classifier.cuh"
#include "runtime/kernels/ops/embedding.cuh"
#include "runtime/kernels/ops/layernorm.cuh"
#include "runtime/kernels/ops/matmul.cuh"
#include "runtime/kernels/ops/nf4.cuh"
#include "runtime/kernels/ops/pointwise.cuh"
#include "runtime/kernels/ops/rmsnorm.cuh"
#include "runtime/kernels/ops/rope.cuh"
#include "runtime/kernels/ops/sum_squares.cuh"
#include "runtime/kernels/ops/swiglu.cuh"
#ifdef ZEROD_WITH_CUDNN
#include "runtime/kernels/cuda/cudnn_sdpa.h"
#endif

namespace zerod {
namespace {

absl::Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(st), ": ", cublasGetStatusString(st)));
}

class CudaKernels : public Kernels {
 public:
  CudaKernels(Device& d, DType precision) : dev_(d), op_(precision) {}
  ~CudaKernels() override {
    if (blas_) cublasDestroy(blas_);
  }

  absl::Status init() {
    ZEROD_RETURN_IF_ERROR(cublas_status(cublasCreate(&blas_), "cublasCreate"));
    ZEROD_RETURN_IF_ERROR(cublas_status(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    // One workspace for cuBLAS and cuBLASLt, whose products run one at a
    // time on the compute stream; accounted, and a run repeats its bits.
    const std::vector<BufferSpec> own = memory().table_buffers();
    ZEROD_ASSIGN_OR_RETURN(blas_workspace_, allocate_spec(dev_, own[KernelMemory::kBlasWorkspace]));
    ZEROD_RETURN_IF_ERROR(lt_.init(blas_workspace_.data(), blas_workspace_.bytes()));
    row_shared_limits_ = cuda::row_shared_limits();  // the device is current on the thread that makes its table
    ZEROD_ASSIGN_OR_RETURN(partials_, allocate_spec(dev_, own[KernelMemory::kColumnPartials]));
    ZEROD_ASSIGN_OR_RETURN(maps_, allocate_spec(dev_, own[KernelMemory::kQuantMaps]));
#ifdef ZEROD_WITH_CUDNN
    // cuDNN's attention takes 16-bit operands only.
    if (op_ != DType::kF32) {
      absl::StatusOr<std::unique_ptr<cuda::CudnnSdpa>> sdpa = cuda::CudnnSdpa::create();
      if (sdpa.ok()) {
        sdpa_ = std::move(*sdpa);
      } else {
        std::fprintf(stderr, "zerod: attention runs unfused: %s\n", sdpa.status().ToString().c_str());
      }
    }
#endif
    const QuantMap maps[2] = {signed_dynamic_map(), unsigned_dynamic_map()};
    Stream& s = dev_.compute_stream();
    dev_.copy(s, maps_.data(), maps, sizeof maps);
    return dev_.synchronize(s);
  }

  DType operand_type() const override { return op_; }
  int64_t launches() const override { return cuda::launch_count().load(std::memory_order_relaxed); }
  KernelMemory memory() const override { return {KernelBackend::kCuda}; }

  void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                      int OC) override {
    cuda::matmul_forward(cs(s), op_, lt_, out, inp, w, bias, N, C, OC);
  }
  void matmul_gelu_forward(Stream& s, void* out, void* pre, const void* inp, const void* w, const void* bias, int64_t N,
                           int C, int OC) override {
    if (!cuda::matmul_gelu_forward(cs(s), op_, lt_, out, pre, inp, w, bias, N, C, OC)) {
      Kernels::matmul_gelu_forward(s, out, pre, inp, w, bias, N, C, OC);
    }
  }
  void matmul_backward_gelu(Stream& s, void* dpre, float* dw, float* dbias, const void* dout, const void* pre,
                            const void* inp, const void* w, int64_t N, int C, int OC) override {
    if (!cuda::matmul_backward_gelu(cs(s), op_, lt_, partials(), dpre, dw, dbias, dout, pre, inp, w, N, C, OC)) {
      Kernels::matmul_backward_gelu(s, dpre, dw, dbias, dout, pre, inp, w, N, C, OC);
    }
  }
  void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       int64_t N, int C, int OC) override {
    cuda::matmul_backward(cs(s), op_, lt_, partials(), dinp, dw, dbias, dout, inp, w, N, C, OC);
  }
  void lora_down(Stream& s, void* u, const void* x, const void* a, int64_t N, int in, int r, float scale) override {
    cuda::lora_down(cs(s), op_, lt_, u, x, a, N, in, r, scale);
  }
  void lora_up(Stream& s, void* y, int64_t ld, int64_t c0, const void* u, const void* b, int64_t N, int r, int out,
               void* /*scratch*/) override {
    cuda::lora_up(cs(s), op_, lt_, y, ld, c0, u, b, N, r, out);
  }
  void lora_up_backward(Stream& s, void* du, float* db, const void* dy, int64_t ld, int64_t c0, const void* u,
                        const void* b, int64_t N, int r, int out, float scale, void* /*scratch*/) override {
    cuda::lora_up_backward(cs(s), op_, lt_, du, db, dy, ld, c0, u, b, N, r, out, scale);
  }
  void lora_down_backward(Stream& s, void* dx, const void* du, const void* a, int64_t N, int in, int r,
                          void* /*scratch*/) override {
    cuda::lora_down_backward(cs(s), op_, lt_, dx, du, a, N, in, r);
  }
  void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w, const void* b,
                         int64_t N, int C) override {
    cuda::layernorm_forward(cs(s), op_, out, mean, rstd, inp, w, b, N, C);
  }
  void residual_layernorm_forward(Stream& s, void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* w, const void* bias, int64_t N, int C) override {
    if (!cuda::residual_layernorm_forward(cs(s), op_, res, out, mean, rstd, a, b, w, bias, N, C)) {
      Kernels::residual_layernorm_forward(s, res, out, mean, rstd, a, b, w, bias, N, C);
    }
  }
  void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp, const void* w,
                          const float* mean, const float* rstd, int64_t N, int C) override {
    cuda::layernorm_backward(cs(s), op_, partials(), dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  // Packed sequences (pos) keep to their documents on either path.
  void attention_forward(Stream& s, void* out, float* lse, float* scratch, const void* qkv, int B, int T, int C, int NH,
                         int KV, const int32_t* pos = nullptr) override {
    if (fused_attention(s, false, B, T, C, NH, KV, scratch, pos,
                        {{cuda::kSdpaQ, qkv},
                         {cuda::kSdpaK, qkv},
                         {cuda::kSdpaV, qkv},
                         {cuda::kSdpaO, out},
                         {cuda::kSdpaLse, lse}})) {
      return;
    }
    cuda::attention_forward(cs(s), op_, gemm_on(s), out, lse, scratch, qkv, B, T, C, NH, KV, pos);
  }
  // Its operands are the model's own type: nothing is rounded (`rounded` is kF32).
  void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                          float* scratch, int B, int T, int C, int NH, int KV, DType,
                          const int32_t* pos = nullptr) override {
    if (fused_attention(s, true, B, T, C, NH, KV, scratch, pos,
                        {{cuda::kSdpaQ, qkv},
                         {cuda::kSdpaK, qkv},
                         {cuda::kSdpaV, qkv},
                         {cuda::kSdpaO, out},
                         {cuda::kSdpaLse, lse},
                         {cuda::kSdpaDO, dout},
                         {cuda::kSdpaDQ, dqkv},
                         {cuda::kSdpaDK, dqkv},
                         {cuda::kSdpaDV, dqkv}})) {
      return;
    }
    cuda::attention_backward(cs(s), op_, gemm_on(s), dqkv, dout, qkv, lse, scratch, B, T, C, NH, KV, pos);
  }
  void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                       float eps) override {
    cuda::rmsnorm_forward(cs(s), op_, out, rstd, inp, w, N, C, eps);
  }
  void residual_rmsnorm_forward(Stream& s, void* res, void* out, float* rstd, const void* a, const void* b,
                                const void* w, int64_t N, int C, float eps) override {
    if (!cuda::residual_rmsnorm_forward(cs(s), op_, res, out, rstd, a, b, w, N, C, eps)) {
      Kernels::residual_rmsnorm_forward(s, res, out, rstd, a, b, w, N, C, eps);
    }
  }
  void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int64_t N, int C) override {
    cuda::rmsnorm_backward(cs(s), op_, partials(), dinp, dw, dout, inp, w, rstd, N, C);
  }
  void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) override {
    cuda::swiglu_forward(cs(s), op_, out, inp, N, F);
  }
  void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    cuda::swiglu_backward(cs(s), op_, dinp, inp, dout, N, F);
  }
  void rope_forward(Stream& s, void* qkv, const float* table, const RopeShape& shape, int64_t N) override {
    cuda::rope_in_place(cs(s), op_, qkv, table, shape, N, 1.0f, "rope_forward");
  }
  void rope_backward(Stream& s, void* dqkv, const float* table, const RopeShape& shape, int64_t N) override {
    cuda::rope_in_place(cs(s), op_, dqkv, table, shape, N, -1.0f, "rope_backward");
  }
  void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) override {
    cuda::take_columns(cs(s), op_, out, x, ld, c0, N, n);
  }
  void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) override {
    cuda::add_columns(cs(s), op_, y, ld, c0, t, N, n);
  }
  void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) override {
    cuda::gelu_forward(cs(s), op_, out, inp, n);
  }
  void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) override {
    cuda::gelu_backward(cs(s), op_, dinp, inp, dout, n);
  }
  void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) override {
    cuda::residual_forward(cs(s), op_, out, a, b, n);
  }
  void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T,
                         int C, const int32_t* pos = nullptr) override {
    cuda::embedding_forward(cs(s), op_, out, tokens, wte, wpe, B, T, C, pos);
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* order, int B, int T, int C, const int32_t* pos = nullptr,
                          const int32_t* pos_order = nullptr) override {
    cuda::embedding_backward(cs(s), op_, dwte, dwpe, dout, tokens, order, B, T, C, pos, pos_order);
  }
  void classifier_logits(Stream& s, float* logits, const void* inp, int64_t inp_stride, const void* wte, int64_t rows,
                         int C, int V) override {
    cuda::classifier_logits(cs(s), op_, lt_, logits, inp, inp_stride, wte, rows, C, V);
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    cuda::classifier_forward_backward(cs(s), op_, lt_, a, memory().logits_stride(a.V), row_shared_limits_);
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override { cuda::round_to(cs(s), t, x, n); }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    cuda::convert_from_f32(cs(s), to, src, dst, n);
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    cuda::convert_to_f32(cs(s), from, src, dst, n);
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override { cuda::sum(cs(s), x, n, out); }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    const SquaresOf t{x, n, out};
    sum_squares_tensors(s, {&t, 1});
  }
  void sum_squares_tensors(Stream& s, absl::Span<const SquaresOf> ts) override {
    cuda::sum_squares_tensors(cs(s), partials_.ptr<double>(), kMaxChunks, ts.data(), ts.size());
  }
  void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                     double* sumsq) override {
    cuda::update_factor(cs(s), sums, n, loss_scale, clip, factor, sumsq);
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override { cuda::add(cs(s), dst, src, n); }
  void scale(Stream& s, void* x, float a, int64_t n) override { cuda::scale(cs(s), op_, x, a, n); }
  void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) override {
    cuda::dropout(cs(s), op_, y, x, n, p, seed);
  }
  void dropout_add(Stream& s, void* y, void* t, int64_t n, float p, uint64_t seed) override {
    cuda::dropout_add(cs(s), op_, y, t, n, p, seed);
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override { adam_tensors(s, {&t, 1}, {&step, 1}); }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    adam8bit_tensors(s, {&t, 1}, {&step, 1});
  }
  void adam_tensors(Stream& s, absl::Span<const AdamTensor> ts, absl::Span<const AdamStep> steps) override {
    cuda::adam_tensors(cs(s), ts, steps);
  }
  void adam8bit_tensors(Stream& s, absl::Span<const Adam8bitTensor> ts, absl::Span<const AdamStep> steps) override {
    cuda::adam8bit_tensors(cs(s), maps_.ptr<const QuantMap>(), ts, steps);
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) override {
    cuda::for_operands(op_, [&](auto tag) {
      cuda::nf4_dequantize_transposed<decltype(tag)::value>(cs(s), t, d, out);
    });
  }

 private:
  // Sums of squares of up to 2^32 elements: their chunks' partials share
  // the column sums' buffer.
  static constexpr int64_t kMaxChunks = int64_t{1} << 16;
  static_assert(kMaxChunks * sizeof(double) <= cuda::kColumnPartials * sizeof(float));

  static cudaStream_t cs(Stream& s) { return cuda_stream(s); }
  float* partials() { return partials_.ptr<float>(); }
  // Attention's products on stream s through this table's cuBLAS.
  cuda::AttentionGemm gemm_on(Stream& s) {
    return [this, &s](const cuda::ColMajorGemm& g) { gemm(s, g); };
  }

  // Attention as cuDNN's fused kernels, `buffers` each tensor's (sdpa_offset
  // is added here), in the scratch the memory plan gives attention
  // (kernel_memory.cc): packed sequences' (pos) document starts, the
  // backward's row sums, then cuDNN's workspace; in parts (a few
  // sequences, or heads of one, a call: CudnnSdpa::split) where all at once
  // would want more. False where the build has no cuDNN, a tensor is not
  // 16-byte aligned, or cuDNN does not run the shape (said once on stderr):
  // the table's own attention runs, and writes every output again over
  // whatever was enqueued before a refusal.
  bool fused_attention(Stream& s, bool backward, int B, int T, int C, int NH, int KV, float* scratch,
                       const int32_t* pos, std::vector<std::pair<int64_t, const void*>> buffers) {
#ifdef ZEROD_WITH_CUDNN
    // cuDNN's backward takes no sequence of one token.
    if (!sdpa_ || (backward && T == 1)) return false;
    cuda::SdpaShape shape{B, T, C, NH, KV, op_ == DType::kBF16 ? cuda::SdpaType::kBF16 : cuda::SdpaType::kF16};
    shape.packed = pos != nullptr;
    const auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
    const int64_t starts = pos ? aligned(B * shape.doc_stride() * 4) : 0;
    auto row_dot = [&](int n, int m) { return backward ? aligned(int64_t(n) * m * T * 4) : 0; };
    const int64_t room = memory().attention_scratch_floats(B, T, C, NH, op_) * 4 - starts;
    const absl::StatusOr<cuda::SdpaSplit> split =
        sdpa_->split(shape, backward, [&](int n, int m) { return room - row_dot(n, m); });
    if (!split.ok()) return false;
    cuda::SdpaShape part = shape;
    part.B = split->sequences;
    part.heads = split->heads == NH ? 0 : split->heads;
    char* at_scratch = reinterpret_cast<char*>(scratch);
    if (pos) buffers.emplace_back(cuda::kSdpaDocStart, at_scratch);
    // Every call's pointers are checked before any is enqueued.
    std::vector<std::vector<std::pair<int64_t, void*>>> calls;
    for (int b = 0; b < B; b += split->sequences) {
      for (int h = 0; h < NH; h += split->heads) {
        std::vector<std::pair<int64_t, void*>>& at = calls.emplace_back();
        for (const auto& [uid, p] : buffers) {
          const int64_t elements = cuda::sdpa_offset(shape, uid) + cuda::sdpa_part_offset(shape, uid, b, h);
          const int64_t size = uid == cuda::kSdpaLse || uid == cuda::kSdpaDocStart ? 4 : dtype_size(op_);
          void* q = static_cast<char*>(const_cast<void*>(p)) + elements * size;
          // Not kept as the shape's answer: another call's buffers may be aligned.
          if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
          at.emplace_back(uid, q);
        }
        if (backward) at.emplace_back(cuda::kSdpaRowDot, at_scratch + starts);
      }
    }
    if (pos) cuda::document_starts(cs(s), reinterpret_cast<int32_t*>(at_scratch), pos, B, T, shape.doc_stride());
    char* workspace = at_scratch + starts + row_dot(split->sequences, split->heads);
    for (const auto& at : calls) {
      if (const absl::Status why = sdpa_->run(part, backward, cs(s), at, workspace); !why.ok()) {
        // The table's own attention writes every output again.
        sdpa_->refuse(shape, backward, why);
        return false;
      }
    }
    return true;
#else
    return false;
#endif
  }

  // Attention's fp32 products through cuBLAS, fp32 in and out: at tf32
  // (inputs rounded to 10 mantissa bits, fp32 sums) for a 16-bit job, as
  // mixed precision does elsewhere; plain fp32 for an fp32 one.
  void gemm(Stream& s, const cuda::ColMajorGemm& g) {
    if (g.m == 0 || g.n == 0) return;
    cudaStream_t stream = cs(s);
    if (stream != blas_stream_) {
      // cublasSetStream drops a user workspace, so it is set again after.
      check(cublasSetStream(blas_, stream), "cublasSetStream");
      check(cublasSetWorkspace(blas_, blas_workspace_.data(), blas_workspace_.bytes()), "cublasSetWorkspace");
      blas_stream_ = stream;
    }
    const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto* A = static_cast<const float*>(g.A);
    const auto* B = static_cast<const float*>(g.B);
    auto* C = static_cast<float*>(g.C);
    if (op_ != DType::kF32) {
      check(cublasGemmStridedBatchedEx_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, A, CUDA_R_32F, g.lda, g.stride_a, B,
                                          CUDA_R_32F, g.ldb, g.stride_b, &g.beta, C, CUDA_R_32F, g.ldc, g.stride_c,
                                          g.batch, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
      cuda::check_launch(stream, "cublasGemmStridedBatchedEx");
      return;
    }
    if (g.batch == 1) {
      check(cublasSgemm_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, A, g.lda, B, g.ldb, &g.beta, C, g.ldc),
            "cublasSgemm");
      cuda::check_launch(stream, "cublasSgemm");
      return;
    }
    check(cublasSgemmStridedBatched_64(blas_, ta, tb, g.m, g.n, g.k, &g.alpha, A, g.lda, g.stride_a, B, g.ldb,
                                       g.stride_b, &g.beta, C, g.ldc, g.stride_c, g.batch),
          "cublasSgemmStridedBatched");
    cuda::check_launch(stream, "cublasSgemmStridedBatched");
  }
  static void check(cublasStatus_t st, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    std::fprintf(stderr, "zerod: %s failed: %s\n", what, cublasGetStatusString(st));
    std::abort();
  }

  Device& dev_;
  const DType op_;
  cublasHandle_t blas_ = nullptr;
  cudaStream_t blas_stream_ = nullptr;
  cuda::LtGemm lt_;
  Buffer blas_workspace_, partials_, maps_;
  cuda::RowSharedLimits row_shared_limits_;  // bytes of shared memory a row of logits may take
#ifdef ZEROD_WITH_CUDNN
  std::unique_ptr<cuda::CudnnSdpa> sdpa_;  // null for fp32 operands, or where cuDNN did not start
#endif
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernels>> cuda_kernels(Device& device, DType precision) {
  if (!dynamic_cast<CudaDevice*>(&device)) {
    return absl::InvalidArgumentError(absl::StrCat("the CUDA kernel table needs a CUDA device, not ", device.name()));
  }
  if (precision != DType::kF32 && precision != DType::kBF16 && precision != DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA kernel table computes in fp32, bf16 or fp16, not ", dtype_name(precision)));
  }
  auto k = std::make_unique<CudaKernels>(device, precision);
  ZEROD_RETURN_IF_ERROR(k->init());
  return std::unique_ptr<Kernels>(std::move(k));
}

}  // namespace zerod
