// The CUDA kernel table. Its operands (kernels.h) are of the job's
// precision: the layers' products run through cuBLASLt on them (lt_gemm.h;
// bf16 and fp16 on tensor cores, fp32 sums), the bias, the GELU and its
// backward done by its epilogues; attention of 16-bit operands runs as
// cuDNN's fused attention where the build has cuDNN and cuDNN runs the
// shape (cudnn_sdpa.h), else it widens its operands to fp32 for cuBLAS's
// fp32 products (attention_plan.h). The rest are the bodies of
// *_body.h, which tests/test_cuda_bodies.cc also runs on the CPU: one
// thread per element, row or column chunk, one warp per row of attention's
// scores or of LayerNorm, one block per row of logits or chunk of a sum of
// squares. No reduction uses atomics, so a run gives the same bits every
// time.
#include <cublas_v2.h>

#include <algorithm>
#include <cassert>
#include <functional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/core/cuda_device.h"
#include "runtime/kernels/cuda/attention_body.h"
#include "runtime/kernels/cuda/attention_plan.h"
#include "runtime/kernels/cuda/cuda_table.h"
#include "runtime/kernels/cuda/gemm_args.h"
#include "runtime/kernels/cuda/launch.cuh"
#include "runtime/kernels/cuda/llama_body.h"
#include "runtime/kernels/cuda/lt_gemm.h"
#include "runtime/kernels/cuda/nf4_body.h"
#include "runtime/kernels/cuda/optim_body.h"
#include "runtime/kernels/cuda/pointwise_body.h"
#include "runtime/kernels/cuda/reduce.cuh"
#include "runtime/kernels/cuda/rows_body.h"
#ifdef ZEROD_WITH_CUDNN
#include "runtime/kernels/cuda/cudnn_sdpa.h"
#endif

namespace zerod {
namespace {

using cuda::ConstOperands;
using cuda::launch_block_rows;
using cuda::Operands;
using cuda::launch_each;
using cuda::launch_warp_rows;

absl::Status cublas_status(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(st), ": ", cublasGetStatusString(st)));
}

// 8-bit Adam: one block of kQuantBlock threads per quantization block;
// the block's new absmax is a max (exact in any order), then each thread
// requantizes its own element. A launch takes a group of tensors
// (optim_body.h), its blocks numbered tensor after tensor.
__global__ void adam8bit_kernel(cuda::TensorGroup<Adam8bitTensor> g, const QuantMap* maps) {
  static_assert(kQuantBlock == 256);
  __shared__ float m_max[kQuantBlock], v_max[kQuantBlock];
  const int member = cuda::group_member(g, blockIdx.x);
  const Adam8bitTensor& t = g.t[member];
  AdamStep k = g.k[member];
  if (!resolve_grad_scale(k)) return;  // the same answer in every thread of the block
  const QuantMap& qm = maps[0];
  const QuantMap& qv = maps[1];
  const int64_t blk = blockIdx.x - g.start[member], i = blk * kQuantBlock + threadIdx.x;
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
static_assert(sizeof(cuda::TensorGroup<Adam8bitTensor>) + sizeof(QuantMap*) <= 4096, "a launch's parameters");
static_assert(sizeof(cuda::TensorGroup<AdamTensor>) + 64 <= 4096, "a launch's parameters, with launch_each's own");
static_assert(sizeof(cuda::SquaresGroup) + 64 <= 4096, "a launch's parameters, with a lambda's own");

void adam_group(cudaStream_t s, const cuda::TensorGroup<AdamTensor>& g) {
  launch_each(s, g.start[g.count], "adam", [=] __device__(int64_t i) { cuda::adam_group_at(i, g); });
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

template <DType kT, class F>
void map_as(cudaStream_t s, const char* what, void* out, const void* a, const void* b, int64_t n, F f) {
  const int64_t vectors = cuda::vectors_for<kT>(n, out, a, b);
  launch_each(s, cuda::map_threads<kT>(n, vectors), what,
              [=] __device__(int64_t t) { cuda::map_at<kT>(t, vectors, out, a, b, f); });
}

// f(OperandTag<t>{}): the one place a run-time operand type picks the
// kernels compiled for it.
template <DType kT>
using OperandTag = std::integral_constant<DType, kT>;
template <class F>
decltype(auto) for_operands(DType t, F f) {
  if (t == DType::kBF16) return f(OperandTag<DType::kBF16>{});
  if (t == DType::kF16) return f(OperandTag<DType::kF16>{});
  return f(OperandTag<DType::kF32>{});
}

// LayerNorm's rows 16 bytes a lane (rows_body.h's vec_ bodies), a warp a
// row, and its parameters' gradients W columns a thread. A row the warp
// can hold in registers (HeldRow) is read once; a longer one three times,
// the later two from cache.
template <DType kT>
__device__ void layernorm_row(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                              int64_t n, int C, int lane) {
  const float m = cuda::warp_reduce(cuda::vec_row_sum<kT>(x, C, lane, 32), cuda::Sum()) / C;
  const float r =
      cuda::layernorm_rstd(cuda::warp_reduce(cuda::vec_row_squares_about<kT>(x, C, m, lane, 32), cuda::Sum()), C);
  cuda::vec_layernorm_write<kT>(out, x, w, b, C, m, r, lane, 32);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}
template <DType kT, int kHeld>
__device__ void held_layernorm_row(const cuda::HeldRow<kT, kHeld>& x, void* out, float* mean, float* rstd,
                                   const void* w, const void* b, int64_t n, int C, int lane) {
  const float m = cuda::warp_reduce(x.sum(), cuda::Sum()) / C;
  const float r = cuda::layernorm_rstd(cuda::warp_reduce(x.squares_about(m), cuda::Sum()), C);
  x.layernorm_write(out, w, b, m, r);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}
// f(integral_constant<int, kHeld>) for the vectors a lane holds of a row
// of C on a warp (rows_body.h's held_vectors); false where a row is too
// long to hold.
template <DType kT, class F>
bool with_held_row(int C, F f) {
  switch (cuda::held_vectors<kT>(C, 32)) {
    case 4:
      f(std::integral_constant<int, 4>{});
      return true;
    case 8:
      f(std::integral_constant<int, 8>{});
      return true;
    case 16:
      f(std::integral_constant<int, 16>{});
      return true;
    default:
      return false;
  }
}
template <DType kT, int kHeld>
void held_layernorm_forward_as(cudaStream_t s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                               const void* b, int64_t N, int C) {
  constexpr int64_t ob = cuda::operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
    cuda::HeldRow<kT, kHeld> x(C, lane, 32);
    x.load(static_cast<const char*>(inp) + n * C * ob);
    held_layernorm_row(x, static_cast<char*>(out) + n * C * ob, mean, rstd, w, b, n, C, lane);
  });
}
template <DType kT>
void layernorm_forward_as(cudaStream_t s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                          const void* b, int64_t N, int C) {
  if (with_held_row<kT>(C, [&](auto h) {
        held_layernorm_forward_as<kT, decltype(h)::value>(s, out, mean, rstd, inp, w, b, N, C);
      })) {
    return;
  }
  constexpr int64_t ob = cuda::operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
    layernorm_row<kT>(static_cast<char*>(out) + n * C * ob, mean, rstd, static_cast<const char*>(inp) + n * C * ob, w,
                      b, n, C, lane);
  });
}
// The sum's row written, then normalized: from registers where the warp
// holds the row, else from what each lane wrote (its re-reads hit the
// cache). HBM sees a and b read, res and out written. A lane reads a and
// b only where it writes res, so res may be a.
template <DType kT, int kHeld>
void held_residual_layernorm_forward_as(cudaStream_t s, void* res, void* out, float* mean, float* rstd, const void* a,
                                        const void* b, const void* w, const void* bias, int64_t N, int C) {
  constexpr int64_t ob = cuda::operand_bytes(kT);
  launch_warp_rows(s, N, "residual_layernorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    cuda::HeldRow<kT, kHeld> x(C, lane, 32);
    x.load_sum(static_cast<char*>(res) + at, static_cast<const char*>(a) + at, static_cast<const char*>(b) + at);
    held_layernorm_row(x, static_cast<char*>(out) + at, mean, rstd, w, bias, n, C, lane);
  });
}
template <DType kT>
void residual_layernorm_forward_as(cudaStream_t s, void* res, void* out, float* mean, float* rstd, const void* a,
                                   const void* b, const void* w, const void* bias, int64_t N, int C) {
  if (with_held_row<kT>(C, [&](auto h) {
        held_residual_layernorm_forward_as<kT, decltype(h)::value>(s, res, out, mean, rstd, a, b, w, bias, N, C);
      })) {
    return;
  }
  constexpr int64_t ob = cuda::operand_bytes(kT);
  launch_warp_rows(s, N, "residual_layernorm_forward", [=] __device__(int64_t n, int lane) {
    const int64_t at = n * C * ob;
    void* x = static_cast<char*>(res) + at;
    cuda::vec_residual_row<kT>(x, static_cast<const char*>(a) + at, static_cast<const char*>(b) + at, C, lane, 32);
    layernorm_row<kT>(static_cast<char*>(out) + at, mean, rstd, x, w, bias, n, C, lane);
  });
}
template <DType kT>
void layernorm_backward_rows_as(cudaStream_t s, void* dinp, const void* dout, const void* inp, const void* w,
                                const float* mean, const float* rstd, int64_t N, int C) {
  constexpr int64_t ob = cuda::operand_bytes(kT);
  launch_warp_rows(s, N, "layernorm_backward", [=] __device__(int64_t n, int lane) {
    const void* x = static_cast<const char*>(inp) + n * C * ob;
    const void* dy = static_cast<const char*>(dout) + n * C * ob;
    cuda::LayerNormRowSums sums = cuda::vec_layernorm_backward_sums<kT>(dy, x, w, mean[n], rstd[n], C, lane, 32);
    sums.dnorm = cuda::warp_reduce(sums.dnorm, cuda::Sum());
    sums.dnorm_norm = cuda::warp_reduce(sums.dnorm_norm, cuda::Sum());
    cuda::vec_layernorm_backward_write<kT>(static_cast<char*>(dinp) + n * C * ob, dy, x, w, mean[n], rstd[n], sums, C,
                                           lane, 32);
  });
}
template <DType kT>
void layernorm_params_partials_as(cudaStream_t s, float* partial, const void* dout, const void* inp,
                                  const float* mean, const float* rstd, int64_t N, int C, int64_t rows,
                                  int64_t chunks) {
  launch_each(s, chunks * (C / cuda::RowVectors<kT>::W), "layernorm_backward_partials", [=] __device__(int64_t j) {
    cuda::vec_layernorm_params_partial_at<kT>(j, partial, dout, inp, mean, rstd, N, C, rows);
  });
}
template <DType kT>
void bias_partials_as(cudaStream_t s, float* partial, const void* dout, int64_t N, int OC, int64_t rows,
                      int64_t chunks) {
  launch_each(s, chunks * (OC / cuda::RowVectors<kT>::W), "bias_backward_partials",
              [=] __device__(int64_t j) { cuda::vec_bias_partial_at<kT>(j, partial, dout, N, OC, rows); });
}

// The embedding 16 bytes a thread (a thread an element read 0.1 of HBM's
// bandwidth on an H200).
template <DType kT>
void embedding_forward_as(cudaStream_t s, void* out, const int32_t* tokens, const void* wte, const void* wpe,
                          int64_t N, int T, int C) {
  launch_each(s, N * (C / cuda::RowVectors<kT>::W), "embedding_forward",
              [=] __device__(int64_t t) { cuda::vec_embedding_forward_at<kT>(t, out, tokens, wte, wpe, T, C); });
}

// A row of logits on a block: its loss, and its gradient in its place.
// `copy`: shared memory for the row's whole vectors, or null (the row is
// read twice).
template <DType kT>
__device__ void softmax_cross_entropy_row(int64_t r, int lane, int lanes, void* copy, void* logits, int64_t ld,
                                          double* losses, const int32_t* targets, int V, float dloss) {
  void* z = static_cast<char*>(logits) + r * ld * cuda::operand_bytes(kT);
  const int target = targets[r];
  assert(target < V);
  if (target < 0) {  // left out by a loss mask: no loss, no gradient (a row a block: all its lanes return here)
    if (lane == 0) losses[r] = 0.0;
    if (dloss != 0.0f)
      for (int i = lane; i < V; i += lanes) cuda::store_f32(z, kT, i, 0.0f);
    return;
  }
  const float z_target = cuda::load_f32(z, kT, target);  // read before any lane overwrites it
  const cuda::SoftmaxPart part = cuda::vec_logits_row_part<kT>(z, V, lane, lanes, copy);
  const float M = cuda::block_reduce(part.max, cuda::Max());
  const float S = cuda::block_reduce(cuda::softmax_part_sum(part, M), cuda::Sum());
  if (lane == 0) losses[r] = cuda::softmax_loss(z_target, M, S);
  if (dloss != 0.0f) cuda::vec_softmax_grad_write<kT>(z, copy ? copy : z, V, target, M, S, dloss, lane, lanes);
}
// A row whose whole vectors fit `shared_limit` (launch.cuh's
// row_shared_limit; gpt2's 50257 bf16 logits take 98 KB, two blocks an SM
// of an H100) is read once, into shared memory, by a block of 512 lanes;
// a longer one (an fp32 job's), or one whose gradient is not wanted, twice
// from global memory, by 256.
template <DType kT>
void softmax_cross_entropy_as(cudaStream_t s, void* logits, int64_t ld, double* losses, const int32_t* targets,
                              int64_t rows, int V, float dloss, int64_t shared_limit) {
  const int64_t shared = cuda::softmax_copy_bytes<kT>(V);
  if (dloss != 0.0f && shared <= shared_limit) {
    cuda::launch_block_rows_shared(s, rows, shared, "softmax_cross_entropy",
                                   [=] __device__(int64_t r, int lane, int lanes, void* copy) {
                                     softmax_cross_entropy_row<kT>(r, lane, lanes, copy, logits, ld, losses, targets,
                                                                   V, dloss);
                                   });
    return;
  }
  launch_block_rows(s, rows, "softmax_cross_entropy", [=] __device__(int64_t r, int lane, int lanes) {
    softmax_cross_entropy_row<kT>(r, lane, lanes, nullptr, logits, ld, losses, targets, V, dloss);
  });
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
    ZEROD_ASSIGN_OR_RETURN(blas_workspace_, dev_.allocate(KernelMemory::kCudaBlasWorkspace, Category::kWorkspace));
    ZEROD_RETURN_IF_ERROR(lt_.init(blas_workspace_.data(), blas_workspace_.bytes()));
    row_shared_limit_ = cuda::row_shared_limit();  // the device is current on the thread that makes its table
    ZEROD_ASSIGN_OR_RETURN(partials_, dev_.allocate(cuda::kColumnPartials * sizeof(float), Category::kWorkspace));
    ZEROD_ASSIGN_OR_RETURN(maps_, dev_.allocate(2 * sizeof(QuantMap), Category::kWorkspace));
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
  void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                      int OC) override {
    lt_.run(cs(s), cuda::matmul_forward_gemm(out, inp, w, bias, N, C, OC), op_, op_);
  }
  // 16-bit operands: the GELU as the product's epilogue (the product
  // writes pre and out), where cuBLASLt has one for the shape; else, and
  // for fp32 operands, the two ops. An fp32 job keeps the GELU of
  // pointwise_body.h, the CPU's formula to fp32's rounding: the epilogue
  // evaluates it its own way, which only 16-bit tolerances cover.
  void matmul_gelu_forward(Stream& s, void* out, void* pre, const void* inp, const void* w, const void* bias,
                           int64_t N, int C, int OC) override {
    if (op_ != DType::kF32 &&
        lt_.try_run(cs(s), cuda::matmul_gelu_forward_gemm(out, pre, inp, w, bias, N, C, OC), op_, op_)) {
      return;
    }
    Kernels::matmul_gelu_forward(s, out, pre, inp, w, bias, N, C, OC);
  }
  void matmul_backward_gelu(Stream& s, void* dpre, float* dw, float* dbias, const void* dout, const void* pre,
                            const void* inp, const void* w, int64_t N, int C, int OC) override {
    if (op_ == DType::kF32 ||
        !lt_.try_run(cs(s), cuda::matmul_dpre_gelu_gemm(dpre, pre, dout, w, N, C, OC), op_, op_)) {
      return Kernels::matmul_backward_gelu(s, dpre, dw, dbias, dout, pre, inp, w, N, C, OC);
    }
    matmul_backward(s, nullptr, dw, dbias, dout, inp, w, N, C, OC);
  }
  // The bias gradient is a column sum of ours, not cuBLASLt's BGRADB or
  // DGELU_BGRAD epilogue: those write the gradient in the product's output
  // type, where ours adds it to the fp32 one (micro-batches accumulate) in
  // a fixed order.
  void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                       const void* w, int64_t N, int C, int OC) override {
    if (dinp) lt_.run(cs(s), cuda::matmul_dinp_gemm(dinp, dout, w, N, C, OC), op_, op_);
    if (dw) lt_.run(cs(s), cuda::matmul_dw_gemm(dw, dout, inp, N, C, OC), op_, DType::kF32);
    if (!dbias) return;
    const int64_t rows = cuda::column_chunk_rows(N, OC), chunks = column_chunks(N, rows, OC, "bias_backward");
    float* partial = partials_.ptr<float>();
    const ConstOperands dy = in(dout);
    if (in_vectors(OC, {dout})) {
      for_operands(op_, [&](auto t) {
        bias_partials_as<decltype(t)::value>(cs(s), partial, dout, N, OC, rows, chunks);
      });
    } else {
      launch_each(cs(s), chunks * OC, "bias_backward_partials",
                  [=] __device__(int64_t j) { cuda::bias_partial_at(j, partial, dy, N, OC, rows); });
    }
    launch_warp_rows(cs(s), OC, "bias_backward_totals", [=] __device__(int64_t o, int lane) {
      const float g = cuda::warp_reduce(cuda::column_share(o, lane, 32, partial, chunks, OC), cuda::Sum());
      if (lane == 0) dbias[o] += g;
    });
  }
  void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                         const void* b, int64_t N, int C) override {
    if (in_vectors(C, {out, inp, w, b})) {
      return for_operands(
          op_, [&](auto t) { layernorm_forward_as<decltype(t)::value>(cs(s), out, mean, rstd, inp, w, b, N, C); });
    }
    const Operands o = ops(out);
    const ConstOperands x0 = in(inp), wt = in(w), bt = in(b);
    launch_warp_rows(cs(s), N, "layernorm_forward", [=] __device__(int64_t n, int lane) {
      const ConstOperands x = x0 + n * C;
      const float m = cuda::warp_reduce(cuda::row_sum(x, C, lane, 32), cuda::Sum()) / C;
      const float r =
          cuda::layernorm_rstd(cuda::warp_reduce(cuda::row_squares_about(x, C, m, lane, 32), cuda::Sum()), C);
      cuda::layernorm_write(o + n * C, x, wt, bt, C, m, r, lane, 32);
      if (lane == 0) {
        mean[n] = m;
        rstd[n] = r;
      }
    });
  }
  void residual_layernorm_forward(Stream& s, void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* w, const void* bias, int64_t N, int C) override {
    if (!in_vectors(C, {res, out, a, b, w, bias})) {
      return Kernels::residual_layernorm_forward(s, res, out, mean, rstd, a, b, w, bias, N, C);
    }
    for_operands(op_, [&](auto t) {
      residual_layernorm_forward_as<decltype(t)::value>(cs(s), res, out, mean, rstd, a, b, w, bias, N, C);
    });
  }
  void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp,
                          const void* w, const float* mean, const float* rstd, int64_t N, int C) override {
    const Operands dx0 = ops(dinp);
    const ConstOperands dy0 = in(dout), x0 = in(inp), wt = in(w);
    const bool vec = in_vectors(C, {dinp, dout, inp, w});
    if (vec) {
      for_operands(op_, [&](auto t) {
        layernorm_backward_rows_as<decltype(t)::value>(cs(s), dinp, dout, inp, w, mean, rstd, N, C);
      });
    } else {
      launch_warp_rows(cs(s), N, "layernorm_backward", [=] __device__(int64_t n, int lane) {
        const ConstOperands x = x0 + n * C, dy = dy0 + n * C;
        cuda::LayerNormRowSums sums = cuda::layernorm_backward_sums(dy, x, wt, mean[n], rstd[n], C, lane, 32);
        sums.dnorm = cuda::warp_reduce(sums.dnorm, cuda::Sum());
        sums.dnorm_norm = cuda::warp_reduce(sums.dnorm_norm, cuda::Sum());
        cuda::layernorm_backward_write(dx0 + n * C, dy, x, wt, mean[n], rstd[n], sums, C, lane, 32);
      });
    }
    if (!dw) return;
    const int64_t rows = cuda::column_chunk_rows(N, 2 * C),
                  chunks = column_chunks(N, rows, 2 * C, "layernorm_backward");
    float* partial = partials_.ptr<float>();
    if (vec) {
      for_operands(op_, [&](auto t) {
        layernorm_params_partials_as<decltype(t)::value>(cs(s), partial, dout, inp, mean, rstd, N, C, rows, chunks);
      });
    } else {
      launch_each(cs(s), chunks * C, "layernorm_backward_partials", [=] __device__(int64_t j) {
        cuda::layernorm_params_partial_at(j, partial, dy0, x0, mean, rstd, N, C, rows);
      });
    }
    launch_warp_rows(cs(s), C, "layernorm_backward_totals", [=] __device__(int64_t i, int lane) {
      const float gw = cuda::warp_reduce(cuda::column_share(i, lane, 32, partial, chunks, 2 * C), cuda::Sum());
      const float gb = cuda::warp_reduce(cuda::column_share(i, lane, 32, partial + C, chunks, 2 * C), cuda::Sum());
      if (lane == 0) {
        dw[i] += gw;
        db[i] += gb;
      }
    });
  }
  KernelMemory memory() const override { return {KernelBackend::kCuda}; }
  // 16-bit operands are widened into the scratch after the plan's own
  // (kernel_memory.cc sizes it): qkv, then the output (or its gradient),
  // then qkv's gradient, each [B, T, width] fp32.
  void attention_forward(Stream& s, void* out, float* lse, float* scratch, const void* qkv, int B, int T, int C,
                         int NH) override {
    if (fused_attention(s, false, B, T, C, NH, scratch,
                        {{cuda::kSdpaQ, qkv}, {cuda::kSdpaK, qkv}, {cuda::kSdpaV, qkv}, {cuda::kSdpaO, out},
                         {cuda::kSdpaLse, lse}})) {
      return;
    }
    const AttentionIo io = attention_io(scratch, B, T, C, NH);
    const float* q = widened(s, qkv, io.qkv, io.N * 3 * C);
    float* y = op_ == DType::kF32 ? static_cast<float*>(out) : io.y;
    AttentionExec x{[&](const cuda::ColMajorGemm& g) { gemm(s, g); }, cs(s)};
    cuda::attention_forward_plan(x, y, lse, scratch, q, B, T, C, NH,
                                 cuda::attention_chunk_heads(T, NH));
    narrowed(s, y, out, io.N * C);
  }
  // Its operands are the model's own type: nothing is rounded (`rounded` is kF32).
  void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                          float* scratch, int B, int T, int C, int NH, DType) override {
    if (fused_attention(s, true, B, T, C, NH, scratch,
                        {{cuda::kSdpaQ, qkv}, {cuda::kSdpaK, qkv}, {cuda::kSdpaV, qkv}, {cuda::kSdpaO, out},
                         {cuda::kSdpaLse, lse}, {cuda::kSdpaDO, dout}, {cuda::kSdpaDQ, dqkv}, {cuda::kSdpaDK, dqkv},
                         {cuda::kSdpaDV, dqkv}})) {
      return;
    }
    const AttentionIo io = attention_io(scratch, B, T, C, NH);
    const float* q = widened(s, qkv, io.qkv, io.N * 3 * C);
    const float* dy = widened(s, dout, io.y, io.N * C);
    float* dq = op_ == DType::kF32 ? static_cast<float*>(dqkv) : io.dqkv;
    AttentionExec x{[&](const cuda::ColMajorGemm& g) { gemm(s, g); }, cs(s)};
    cuda::attention_backward_plan(x, dq, dy, q, lse, scratch, B, T, C, NH,
                                  cuda::attention_chunk_heads(T, NH));
    narrowed(s, dq, dqkv, io.N * 3 * C);
  }
  // RMSNorm a warp a row; its weight's gradient in column chunks, as
  // LayerNorm's.
  void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                       float eps) override {
    const Operands o = ops(out);
    const ConstOperands x0 = in(inp), wt = in(w);
    launch_warp_rows(cs(s), N, "rmsnorm_forward", [=] __device__(int64_t n, int lane) {
      const ConstOperands x = x0 + n * C;
      const float r =
          cuda::rmsnorm_rstd(cuda::warp_reduce(cuda::row_squares_about(x, C, 0.0f, lane, 32), cuda::Sum()), C, eps);
      cuda::rmsnorm_write(o + n * C, x, wt, C, r, lane, 32);
      if (lane == 0) rstd[n] = r;
    });
  }
  void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int64_t N, int C) override {
    const Operands dx0 = ops(dinp);
    const ConstOperands dy0 = in(dout), x0 = in(inp), wt = in(w);
    launch_warp_rows(cs(s), N, "rmsnorm_backward", [=] __device__(int64_t n, int lane) {
      const ConstOperands x = x0 + n * C, dy = dy0 + n * C;
      const float sum =
          cuda::warp_reduce(cuda::rmsnorm_backward_sum(dy, x, wt, rstd[n], C, lane, 32), cuda::Sum());
      cuda::rmsnorm_backward_write(dx0 + n * C, dy, x, wt, rstd[n], sum, C, lane, 32);
    });
    if (!dw) return;
    const int64_t rows = cuda::column_chunk_rows(N, C), chunks = column_chunks(N, rows, C, "rmsnorm_backward");
    float* partial = partials_.ptr<float>();
    launch_each(cs(s), chunks * C, "rmsnorm_backward_partials", [=] __device__(int64_t j) {
      cuda::rmsnorm_weight_partial_at(j, partial, dy0, x0, rstd, N, C, rows);
    });
    launch_warp_rows(cs(s), C, "rmsnorm_backward_totals", [=] __device__(int64_t i, int lane) {
      const float g = cuda::warp_reduce(cuda::column_share(i, lane, 32, partial, chunks, C), cuda::Sum());
      if (lane == 0) dw[i] += g;
    });
  }
  void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) override {
    const Operands o = ops(out);
    const ConstOperands x = in(inp);
    launch_each(cs(s), N * F, "swiglu_forward", [=] __device__(int64_t j) { cuda::swiglu_at(j, o, x, F); });
  }
  void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    const Operands dx = ops(dinp);
    const ConstOperands x = in(inp), dy = in(dout);
    launch_each(cs(s), N * F, "swiglu_backward",
                [=] __device__(int64_t j) { cuda::swiglu_backward_at(j, dx, x, dy, F); });
  }
  void rope_forward(Stream& s, void* out, const void* qkv, const float* table, const RopeShape& shape,
                    int64_t N) override {
    const Operands o = ops(out);
    const ConstOperands x = in(qkv);
    launch_each(cs(s), N * 3 * shape.C(), "rope_forward",
                [=] __device__(int64_t j) { cuda::rope_forward_at(j, o, x, table, shape); });
  }
  void rope_backward(Stream& s, void* dqkv, const void* dout, const float* table, const RopeShape& shape,
                     int64_t N) override {
    const Operands dx = ops(dqkv);
    const ConstOperands dy = in(dout);
    launch_each(cs(s), N * shape.width(), "rope_backward",
                [=] __device__(int64_t j) { cuda::rope_backward_at(j, dx, dy, table, shape); });
  }
  void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) override {
    const Operands o = ops(out);
    const ConstOperands in_x = in(x);
    launch_each(cs(s), N * n, "take_columns",
                [=] __device__(int64_t j) { cuda::take_column_at(j, o, in_x, ld, c0, n); });
  }
  void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) override {
    const Operands o = ops(y);
    const ConstOperands in_t = in(t);
    launch_each(cs(s), N * n, "add_columns",
                [=] __device__(int64_t j) { cuda::add_column_at(j, o, in_t, ld, c0, n); });
  }
  void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) override {
    map(s, "gelu_forward", out, inp, nullptr, n, cuda::GeluOf{});
  }
  void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) override {
    map(s, "gelu_backward", dinp, inp, dout, n, cuda::GeluGradOf{});
  }
  void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) override {
    map(s, "residual_forward", out, a, b, n, cuda::SumOf{});
  }
  void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T,
                         int C) override {
    if (in_vectors(C, {out, wte, wpe})) {
      return for_operands(op_, [&](auto t) {
        embedding_forward_as<decltype(t)::value>(cs(s), out, tokens, wte, wpe, int64_t(B) * T, T, C);
      });
    }
    const Operands o = ops(out);
    const ConstOperands te = in(wte), pe = in(wpe);
    launch_each(cs(s), int64_t(B) * T * C, "embedding_forward",
                [=] __device__(int64_t j) { cuda::embedding_forward_at(j, o, tokens, te, pe, T, C); });
  }
  // A block per token's run of positions (rows_body.h), then a thread per
  // element of dwpe: the CPU's order of additions, without a thread that
  // walks every position.
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* order, int B, int T, int C) override {
    const int64_t N = int64_t(B) * T;
    const ConstOperands dy = in(dout);
    launch_block_rows(cs(s), N, "embedding_backward_tokens", [=] __device__(int64_t i, int lane, int lanes) {
      cuda::embedding_backward_run(i, lane, lanes, dwte, dy, tokens, order, N, C);
    });
    if (!dwpe) return;
    launch_each(cs(s), int64_t(T) * C, "embedding_backward_positions",
                [=] __device__(int64_t j) { cuda::embedding_backward_position_at(j, dwpe, dy, B, T, C); });
  }
  void classifier_logits(Stream& s, float* logits, const void* inp, int64_t inp_stride, const void* wte,
                         int64_t rows, int C, int V) override {
    for (const cuda::VocabSlice v : {cuda::vocab_head(V), cuda::vocab_tail(V)}) {
      lt_.run(cs(s), cuda::logits_gemm(logits, V, 4, inp, inp_stride, wte, dtype_size(op_), rows, C, v), op_,
              DType::kF32);
    }
  }
  // Each chunk: its logits as operands, rows 128-byte aligned; one block
  // per row reads them once for the loss and its softmax statistics in
  // fp32 and writes the gradient in their place; then the two products.
  // Each product runs as its vocabulary's whole 16-byte vectors and the
  // rest (gemm_args.h's vocab_head and vocab_tail). The logits are of the
  // job's type already: ClassifierArgs::act has nothing to round here.
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    const int C = a.C, V = a.V;
    const int64_t ld = memory().logits_stride(V), ob = dtype_size(op_);
    const cuda::VocabSlice slices[] = {cuda::vocab_head(V), cuda::vocab_tail(V)};
    for (int64_t r0 = 0; r0 < a.N; r0 += a.chunk_rows) {
      const int64_t rows = std::min(a.chunk_rows, a.N - r0);
      const void* inp = static_cast<const char*>(a.inp) + r0 * C * ob;
      for (const cuda::VocabSlice v : slices) {
        lt_.run(cs(s), cuda::logits_gemm(a.logits, ld, ob, inp, C, a.wte, ob, rows, C, v), op_, op_);
      }
      softmax_cross_entropy(s, a.logits, ld, a.losses + r0, a.targets + r0, rows, V, a.dloss);
      void* dinp = static_cast<char*>(a.dinp) + r0 * C * ob;
      for (const cuda::VocabSlice v : slices) {
        lt_.run(cs(s), cuda::head_dinp_gemm(dinp, a.logits, ld, a.wte, ob, rows, C, v), op_, op_);
        if (a.dwte) lt_.run(cs(s), cuda::head_dwte_gemm(a.dwte, a.logits, ld, inp, ob, rows, C, v), op_, DType::kF32);
      }
    }
  }
  // A block a row of logits (ld apart, so its rows are whole 16-byte
  // vectors: kernel_memory.h): its loss, and its gradient in its place.
  void softmax_cross_entropy(Stream& s, void* logits, int64_t ld, double* losses, const int32_t* targets,
                             int64_t rows, int V, float dloss) {
    for_operands(op_, [&](auto t) {
      softmax_cross_entropy_as<decltype(t)::value>(cs(s), logits, ld, losses, targets, rows, V, dloss,
                                                   row_shared_limit_);
    });
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
  // In cpu::sum_in_lanes's order, on one block: a lane's share, then
  // their tree.
  void sum(Stream& s, const double* x, int64_t n, double* out) override {
    launch_block_rows(cs(s), 1, "sum", [=] __device__(int64_t, int lane, int) {
      const double total = cuda::block_tree_reduce<cpu::kSquaresLanes>(cuda::lane_share(x, n, lane), cuda::Sum());
      if (lane == 0) *out = total;
    });
  }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    const SquaresOf t{x, n, out};
    sum_squares_tensors(s, {&t, 1});
  }
  // A group's chunks, a block each, then its tensors' totals, a block
  // each. The chunks' partial sums share one buffer: the table serves one
  // stream at a time (the compute stream).
  void sum_squares_tensors(Stream& s, absl::Span<const SquaresOf> ts) override {
    for (const SquaresOf& t : ts) {
      if (cpu::squares_chunks(t.n) > kMaxChunks) {
        std::fprintf(stderr, "zerod: sum_squares of %lld elements exceeds the table's %lld chunks\n",
                     static_cast<long long>(t.n), static_cast<long long>(kMaxChunks));
        std::abort();
      }
    }
    double* partial = partials_.ptr<double>();
    static_assert(cpu::kSquaresLanes == cuda::kBlockThreads);
    cuda::for_squares_groups(ts.data(), ts.size(), kMaxChunks, [&](const cuda::SquaresGroup& g) {
      launch_block_rows(cs(s), g.start[g.count], "sum_squares_chunks", [=] __device__(int64_t c, int lane, int) {
        const double p =
            cuda::block_tree_reduce<cpu::kSquaresLanes>(cuda::squares_group_lane(g, c, lane), cuda::Sum());
        if (lane == 0) partial[c] = p;
      });
      launch_block_rows(cs(s), g.count, "sum_squares_totals", [=] __device__(int64_t j, int lane, int) {
        const double total = cuda::block_tree_reduce<cpu::kSquaresLanes>(
            cuda::squares_total_lane(g, partial, static_cast<int>(j), lane), cuda::Sum());
        if (lane == 0) *g.t[j].out = total;
      });
    });
  }
  void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                     double* sumsq) override {
    // A few hundred units: one thread, adding in the host's order.
    launch_each(cs(s), 1, "update_factor", [=] __device__(int64_t) {
      update_factor_of_sums(sums, n, loss_scale, clip, factor, sumsq);
    });
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    launch_each(cs(s), n, "add", [=] __device__(int64_t i) { dst[i] = dst[i] + src[i]; });
  }
  void scale(Stream& s, void* x, float a, int64_t n) override {
    const Operands v = ops(x);
    launch_each(cs(s), n, "scale", [=] __device__(int64_t i) { v[i] = v[i] * a; });
  }
  void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) override {
    const Operands o = ops(y);
    const ConstOperands v = in(x);
    launch_each(cs(s), n, "dropout", [=] __device__(int64_t i) { o[i] = cuda::dropout_at(v[i], p, seed, i); });
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override { adam_tensors(s, {&t, 1}, {&step, 1}); }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    adam8bit_tensors(s, {&t, 1}, {&step, 1});
  }
  // kGroupTensors tensors a launch: gpt2's 148 in 7.
  void adam_tensors(Stream& s, absl::Span<const AdamTensor> ts, absl::Span<const AdamStep> steps) override {
    cuda::for_groups(
        ts, steps, [](const AdamTensor& t) { return t.n; },
        [&](const cuda::TensorGroup<AdamTensor>& g) { adam_group(cs(s), g); });
  }
  void adam8bit_tensors(Stream& s, absl::Span<const Adam8bitTensor> ts, absl::Span<const AdamStep> steps) override {
    cuda::for_groups(
        ts, steps, [](const Adam8bitTensor& t) { return quant_blocks(t.n); },
        [&](const cuda::TensorGroup<Adam8bitTensor>& g) {
          adam8bit_kernel<<<static_cast<unsigned>(g.start[g.count]), kQuantBlock, 0, cs(s)>>>(
              g, maps_.ptr<const QuantMap>());
          cuda::check_launch(cs(s), "adam8bit");
        });
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
  // out = f(a, b) over n operands (pointwise_body.h's map_at), 16 bytes a
  // thread where the pointers allow.
  template <class F>
  void map(Stream& s, const char* what, void* out, const void* a, const void* b, int64_t n, F f) {
    for_operands(op_, [&](auto t) { map_as<decltype(t)::value>(cs(s), what, out, a, b, n, f); });
  }
  Operands ops(void* p) const { return {p, op_}; }
  // Rows of C operands at these pointers go 16 bytes a lane.
  bool in_vectors(int64_t C, std::initializer_list<const void*> ps) const {
    return for_operands(op_, [&](auto t) { return cuda::rows_in_vectors<decltype(t)::value>(C, ps); });
  }
  ConstOperands in(const void* p) const { return {p, op_}; }

  // Attention as cuDNN's fused kernels, `buffers` each tensor's (sdpa_offset
  // is added here), in the scratch the memory plan gives attention
  // (kernel_memory.cc): the backward's row sums, then cuDNN's workspace.
  // False, nothing enqueued, where the build has no cuDNN, a tensor is not
  // 16-byte aligned, or cuDNN does not run the shape (said once on
  // stderr): the table's own attention runs.
  bool fused_attention(Stream& s, bool backward, int B, int T, int C, int NH, float* scratch,
                       std::vector<std::pair<int64_t, const void*>> buffers) {
#ifdef ZEROD_WITH_CUDNN
    // cuDNN's backward takes no sequence of one token.
    if (!sdpa_ || (backward && T == 1)) return false;
    const cuda::SdpaShape shape{B, T, C, NH, op_ == DType::kBF16 ? cuda::SdpaType::kBF16 : cuda::SdpaType::kF16};
    std::vector<std::pair<int64_t, void*>> at;
    for (const auto& [uid, p] : buffers) {
      void* q = static_cast<char*>(const_cast<void*>(p)) + cuda::sdpa_offset(shape, uid) * dtype_size(op_);
      // Not kept as the shape's answer: another call's buffers may be aligned.
      if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
      at.emplace_back(uid, q);
    }
    const int64_t row_dot = backward ? (int64_t(B) * NH * T * 4 + 255) / 256 * 256 : 0;
    const int64_t room = memory().attention_scratch_floats(B, T, C, NH, op_) * 4;
    if (!sdpa_->prepare(shape, backward, room - row_dot).ok()) return false;
    if (backward) at.emplace_back(cuda::kSdpaRowDot, scratch);
    const absl::Status why = sdpa_->run(shape, backward, cs(s), at, reinterpret_cast<char*>(scratch) + row_dot);
    if (why.ok()) return true;
    sdpa_->refuse(shape, backward, why);
#endif
    return false;
  }

  // Where attention's widened operands go in its scratch.
  struct AttentionIo {
    int64_t N;
    float *qkv, *y, *dqkv;
  };
  static AttentionIo attention_io(float* scratch, int B, int T, int C, int NH) {
    const int64_t N = int64_t(B) * T;
    float* io = scratch + cuda::attention_scratch_floats(T, NH);
    return {N, io, io + N * 3 * C, io + N * 4 * C};
  }
  // src as fp32: itself for fp32 operands, else widened into `to`.
  const float* widened(Stream& s, const void* src, float* to, int64_t n) {
    if (op_ == DType::kF32) return static_cast<const float*>(src);
    convert_to_f32(s, op_, src, to, n);
    return to;
  }
  // The fp32 result `from` into the operands at `to` (nothing for fp32,
  // computed in place).
  void narrowed(Stream& s, const float* from, void* to, int64_t n) {
    if (op_ != DType::kF32) convert_from_f32(s, op_, from, to, n);
  }

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
  int64_t row_shared_limit_ = 0;  // bytes of shared memory a row of logits may take
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
    return absl::InvalidArgumentError(absl::StrCat("the CUDA kernel table computes in fp32, bf16 or fp16, not ",
                                                   dtype_name(precision)));
  }
  auto k = std::make_unique<CudaKernels>(device, precision);
  ZEROD_RETURN_IF_ERROR(k->init());
  return std::unique_ptr<Kernels>(std::move(k));
}

}  // namespace zerod
