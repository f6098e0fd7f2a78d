// The kernel table of one device: every op the model and the ZeRO engine
// run on device memory, each enqueued on a stream of that device (see
// runtime/core/device.h for the ordering contract). Pointers are addresses
// in the device's memory tier.
//
// Each op's math, its CPU reference and the bodies the CUDA table runs are
// in runtime/kernels/ops/<op>.h (the CPU's in <op>.cc, the CUDA launches in
// <op>.cuh); the tables (cpu_table.cc, cuda_table.cu) only dispatch. The
// CPU's is the one every other table is tested against: fp32 arithmetic
// (on operands of the table's type, below), weights stored [in, out],
// weight and bias gradients accumulated (+=), each reduction in a fixed
// order.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/kernel_memory.h"
#include "runtime/kernels/ops/adam8bit.h"
#include "runtime/kernels/ops/attention.h"
#include "runtime/kernels/ops/classifier.h"
#include "runtime/kernels/ops/embedding.h"
#include "runtime/kernels/ops/layernorm.h"
#include "runtime/kernels/ops/matmul.h"
#include "runtime/kernels/ops/nf4.h"
#include "runtime/kernels/ops/pointwise.h"
#include "runtime/kernels/ops/rmsnorm.h"
#include "runtime/kernels/ops/rope.h"
#include "runtime/kernels/ops/sum_squares.h"
#include "runtime/kernels/ops/swiglu.h"

namespace zerod {

using cpu::ClassifierArgs;
using cpu::RopeShape;
using cpu::SquaresOf;
// Every table's LayerNorm adds this to the variance.
inline constexpr float kLayerNormEps = cpu::kLayerNormEps;

// Operands. Activations, their gradients and the working weights are
// values of the table's operand type (operand_type(); `void*` below): the
// job's precision on the GPU, so that every op reads and writes 16-bit
// values and products run on tensor cores; fp32 on the CPU, whose kernels
// compute in fp32 on values the model rounds to the precision at fixed
// points. fp32 (`float*`) everywhere: weight gradients (accumulated),
// per-row statistics, scratch, the optimizer's masters and states.
class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual DType operand_type() const = 0;
  // Device launches the table has made so far (kernels, and a library's
  // product as one), where it counts them; else 0.
  virtual int64_t launches() const { return 0; }

  // GPT-2 layers.
  virtual void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                              int OC) = 0;
  virtual void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                               const void* w, int64_t N, int C, int OC) = 0;
  // A product and the GELU after it: pre = inp @ w + bias, out =
  // gelu(pre); and the input gradient of a product whose input was
  // gelu(pre), through the GELU: dpre = (dout @ w^T) * gelu'(pre), with
  // dw and dbias as matmul_backward's. As the two ops in turn (the CPU's
  // bits), unless a table fuses them.
  virtual void matmul_gelu_forward(Stream& s, void* out, void* pre, const void* inp, const void* w, const void* bias,
                                   int64_t N, int C, int OC) {
    matmul_forward(s, pre, inp, w, bias, N, C, OC);
    gelu_forward(s, out, pre, N * OC);
  }
  virtual void matmul_backward_gelu(Stream& s, void* dpre, float* dw, float* dbias, const void* dout, const void* pre,
                                    const void* inp, const void* w, int64_t N, int C, int OC) {
    matmul_backward(s, dpre, dw, dbias, dout, inp, w, N, C, OC);
    gelu_backward(s, dpre, pre, dpre, N * C);
  }
  virtual void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w,
                                 const void* b, int64_t N, int C) = 0;
  // res = a + b, then its LayerNorm into out (res may be a): residual_forward
  // and layernorm_forward in turn, unless a table fuses them. (The
  // backward's residual is fused already: layernorm_backward adds dinp.)
  virtual void residual_layernorm_forward(Stream& s, void* res, void* out, float* mean, float* rstd, const void* a,
                                          const void* b, const void* w, const void* bias, int64_t N, int C) {
    residual_forward(s, res, a, b, N * C);
    layernorm_forward(s, out, mean, rstd, res, w, bias, N, C);
  }
  virtual void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp,
                                  const void* w, const float* mean, const float* rstd, int64_t N, int C) = 0;
  // Causal attention over qkv [B, T, C + 2 KV C / NH]: NH query heads, KV
  // key and value heads, each shared by NH / KV query heads (ops/attention.h);
  // `pos` (null: a sequence a document) packed sequences' positions [B, T]
  // in their documents, on the device: a query sees its own document only.
  // Positions count from 0 at each document's first row, one more each
  // row after (Gpt checks them); the tables rely on it.
  // `stats` is what the forward keeps for the backward,
  // fp32, attention_row_stats() a query row ([B, NH, T, stats]): from it
  // the backward recomputes the softmax probabilities. `rounded`: the type
  // whose values the model's fp32 operands take (kF32: none); a table of
  // fp32 operands rounds the recomputed probabilities to it, as the
  // activations it would have saved.
  int attention_row_stats() const { return memory().attention_row_stats(); }
  virtual void attention_forward(Stream& s, void* out, float* stats, float* scratch, const void* qkv, int B, int T,
                                 int C, int NH, int KV, const int32_t* pos = nullptr) = 0;
  // `out` is the forward's output (a fused backward takes rowsum(dout out)).
  virtual void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out,
                                  const float* stats, float* scratch, int B, int T, int C, int NH, int KV,
                                  DType rounded, const int32_t* pos = nullptr) = 0;
  // Floats of attention's scratch (forward and backward) for B sequences
  // of T, width C in NH heads.
  int64_t attention_scratch_floats(int B, int T, int C, int NH) const {
    return memory().attention_scratch_floats(B, T, C, NH, operand_type());
  }
  // What the table's work needs of memory (kernel_memory.h).
  virtual KernelMemory memory() const = 0;
  // The Llama family's layers (ops/rmsnorm.h, swiglu.h, rope.h): RMSNorm (rstd fp32 a row;
  // backward adds to dinp and dw, dw null when frozen); SwiGLU over rows
  // of [gate | up]; rotary positions on N rows of q, k and v, q and k
  // turned in place by `table` (fp32, [T, hd/2, 2]), and their gradients
  // turned back in place.
  virtual void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                               float eps) = 0;
  // res = a + b, then its RMSNorm into out (res may be a), as
  // residual_layernorm_forward is LayerNorm's.
  virtual void residual_rmsnorm_forward(Stream& s, void* res, void* out, float* rstd, const void* a, const void* b,
                                        const void* w, int64_t N, int C, float eps) {
    residual_forward(s, res, a, b, N * C);
    rmsnorm_forward(s, out, rstd, res, w, N, C, eps);
  }
  virtual void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                                const float* rstd, int64_t N, int C) = 0;
  virtual void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) = 0;
  virtual void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) = 0;
  virtual void rope_forward(Stream& s, void* qkv, const float* table, const RopeShape& shape, int64_t N) = 0;
  virtual void rope_backward(Stream& s, void* dqkv, const float* table, const RopeShape& shape, int64_t N) = 0;
  virtual void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) = 0;
  virtual void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) = 0;
  // out = a + b; out may be a or b.
  virtual void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) = 0;
  // Columns [c0, c0 + n) of N rows `ld` apart: out [N, n] = x's; y's += t.
  virtual void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) = 0;
  virtual void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) = 0;
  // LoRA's products (model/lora.h) beside a base product whose output y
  // has rows `ld` apart, the adapter's columns [c0, c0 + out) of them:
  //   down:          u [N, r] = scale (x [N, in] @ A [in, r])
  //   up:            y[:, c0:] += u @ B [r, out]
  //   up backward:   dB += u^T @ dy[:, c0:]; du = scale (dy[:, c0:] @ B^T)
  //   down backward: dx [N, in] += du @ A^T (A's gradient is matmul_backward's)
  // As the ops above in turn through `scratch` ([N, max(in, out)]
  // operands; the CPU's bits), unless a table takes the columns in place
  // and the scale and the sum into its products.
  virtual void lora_down(Stream& s, void* u, const void* x, const void* a, int64_t N, int in, int r, float scale) {
    matmul_forward(s, u, x, a, nullptr, N, in, r);
    this->scale(s, u, scale, N * r);
  }
  virtual void lora_up(Stream& s, void* y, int64_t ld, int64_t c0, const void* u, const void* b, int64_t N, int r,
                       int out, void* scratch) {
    matmul_forward(s, scratch, u, b, nullptr, N, r, out);
    if (ld == out) {
      residual_forward(s, y, y, scratch, N * out);
    } else {
      add_columns(s, y, ld, c0, scratch, N, out);
    }
  }
  virtual void lora_up_backward(Stream& s, void* du, float* db, const void* dy, int64_t ld, int64_t c0, const void* u,
                                const void* b, int64_t N, int r, int out, float scale, void* scratch) {
    if (ld != out) {
      take_columns(s, scratch, dy, ld, c0, N, out);
      dy = scratch;
    }
    matmul_backward(s, du, db, nullptr, dy, u, b, N, r, out);
    this->scale(s, du, scale, N * r);
  }
  virtual void lora_down_backward(Stream& s, void* dx, const void* du, const void* a, int64_t N, int in, int r,
                                  void* scratch) {
    matmul_backward(s, scratch, nullptr, nullptr, du, nullptr, a, N, in, r);
    residual_forward(s, dx, dx, scratch, N * in);
  }
  // wpe null: no learned positions (a Llama's); so dwpe in the backward.
  // `pos` (null: position t of each sequence) packed sequences' positions
  // in their documents [B, T], on the device.
  virtual void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B,
                                 int T, int C, const int32_t* pos = nullptr) = 0;
  // `order`: the B*T positions sorted by token, ties by position
  // (token_order), on the device: a table may walk each token's positions
  // with it, in order, rather than every position for every column;
  // `pos_order` likewise the rows sorted by `pos` (token_order of pos).
  virtual void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                  const int32_t* order, int B, int T, int C, const int32_t* pos = nullptr,
                                  const int32_t* pos_order = nullptr) = 0;

  // The LM head with fused softmax and cross-entropy. classifier_logits
  // gives fp32 logits (what a caller reads), rows V apart.
  virtual void classifier_logits(Stream& s, float* logits, const void* inp, int64_t inp_stride, const void* wte,
                                 int64_t rows, int C, int V) = 0;
  virtual void classifier_forward_backward(Stream& s, const ClassifierArgs& a) = 0;

  // Casts: fp32 values rounded in place to what `t` holds; fp32 to and
  // from another float type (kF32 copies).
  virtual void round_to(Stream& s, DType t, float* x, int64_t n) = 0;
  virtual void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) = 0;
  virtual void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) = 0;

  // Reductions to one double at *out, each in a fixed order: the sum in
  // index order (the CPU's) or as cpu::sum_in_lanes orders it (the GPU's,
  // whose one thread in index order took 0.17 ms of a gpt2 step); the sum
  // of squares as cpu::sum_squares orders it (not finite on overflow).
  virtual void sum(Stream& s, const double* x, int64_t n, double* out) = 0;
  virtual void sum_squares(Stream& s, const float* x, int64_t n, double* out) = 0;
  // Several: sum_squares() of each in turn, unless a table takes them in
  // fewer launches (a rank's gradients, unit by unit).
  virtual void sum_squares_tensors(Stream& s, absl::Span<const SquaresOf> ts) {
    for (const SquaresOf& t : ts) sum_squares(s, t.x, t.n, t.out);
  }
  // update_factor_of_sums (ops/adam.h) of n units' sums of squares: the
  // factor an update then reads through AdamStep::grad_scale_at, and the
  // total, both where the sums are, so that the host need not wait.
  virtual void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                             double* sumsq) = 0;
  // Gradient accumulation: dst[i] += src[i].
  virtual void add(Stream& s, float* dst, const float* src, int64_t n) = 0;
  // Operands: x[i] *= a.
  virtual void scale(Stream& s, void* x, float a, int64_t n) = 0;
  // Dropout of operands: y[i] = x[i] / (1 - p) where element i is kept,
  // else 0; kept when the draw for (seed, i) (ops/pointwise.h) is at
  // least p, so the same seed gives the same mask wherever it runs. y may
  // be x.
  virtual void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) = 0;
  // y[i] += dropout(t)[i], the mask and scale of dropout's (seed, i): an
  // adapter's input gradient masked as it is summed. As dropout in place
  // and residual_forward in turn (t is overwritten), unless a table fuses
  // them.
  virtual void dropout_add(Stream& s, void* y, void* t, int64_t n, float p, uint64_t seed) {
    dropout(s, t, t, n, p, seed);
    residual_forward(s, y, y, t, n);
  }

  // The optimizer: one Adam/AdamW update of a tensor's fp32 masters, its
  // states (fp32, or 8-bit in blocks) and its optional 16-bit copy, with
  // the math of ops/adam.h and ops/adam8bit.h.
  virtual void adam(Stream& s, const AdamTensor& t, const AdamStep& step) = 0;
  virtual void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) = 0;
  // A rank's tensors, tensor i with steps[i]: adam() (adam8bit()) on each
  // in turn, unless a table updates several in one launch.
  virtual void adam_tensors(Stream& s, absl::Span<const AdamTensor> ts, absl::Span<const AdamStep> steps) {
    for (size_t i = 0; i < ts.size(); ++i) adam(s, ts[i], steps[i]);
  }
  virtual void adam8bit_tensors(Stream& s, absl::Span<const Adam8bitTensor> ts, absl::Span<const AdamStep> steps) {
    for (size_t i = 0; i < ts.size(); ++i) adam8bit(s, ts[i], steps[i]);
  }

  // A frozen linear layer's weight, held in NF4 as [d.rows, d.cols] = [out,
  // in], into its product's operands: out[c * d.ld + r] = weight (r, c)
  // (ops/nf4.h). t.codes 8-byte aligned (Nf4Packing aligns them to 16).
  virtual void nf4_dequantize(Stream& s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) = 0;
};

// fp32 operands x rounded in place to what t holds (how the CPU's table
// computes in a 16-bit type); with t kF32 (operands of the job's type
// already) nothing, not even an empty op.
inline void round_operands(Kernels& k, Stream& s, DType t, void* x, int64_t n) {
  if (t != DType::kF32) k.round_to(s, t, static_cast<float*>(x), n);
}

// The positions 0 .. n-1 of `tokens` sorted by token id, ties in position
// order: embedding_backward's `order`.
void token_order(const int32_t* tokens, int64_t n, int32_t* order);

// The table of `device`'s kind for a job computing in `precision`; it
// must not outlive the device.
absl::StatusOr<std::unique_ptr<Kernels>> kernels_for(Device& device, DType precision = DType::kF32);
// What that table's work needs of memory, without making it.
KernelMemory kernel_memory_for(const Device& device);

}  // namespace zerod
