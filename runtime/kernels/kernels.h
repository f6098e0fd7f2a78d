// The kernel table of one device: every op the model and the ZeRO engine
// run on device memory, each enqueued on a stream of that device (see
// runtime/core/device.h for the ordering contract). Pointers are addresses
// in the device's memory tier.
//
// The math and its conventions are those of runtime/kernels/cpu/
// cpu_kernels.h, which the CPU table wraps and every other table is tested
// against: fp32 compute, weights stored [in, out], weight and bias
// gradients accumulated (+=), each reduction in a fixed order.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/kernels/cpu/adam8bit.h"
#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/kernels/cpu/nf4.h"
#include "runtime/kernels/kernel_memory.h"

namespace zerod {

using cpu::ClassifierArgs;
// Every table's LayerNorm adds this to the variance.
inline constexpr float kLayerNormEps = cpu::kLayerNormEps;

class Kernels {
 public:
  virtual ~Kernels() = default;

  // From now on the operands of matmul_forward and classifier_logits are
  // values of type t (the model rounds those activations to its activation
  // type, and its weights are of it): a table may then multiply them in t,
  // on tensor cores, with the same products. kF32, the default, promises
  // nothing. With t 16-bit a table may also take the other products (the
  // backward's, attention's) at tf32 precision (inputs rounded to 10
  // mantissa bits, fp32 sums), as mixed precision does elsewhere.
  virtual void set_forward_operands(DType /*t*/) {}

  // GPT-2 layers.
  virtual void matmul_forward(Stream& s, float* out, const float* inp, const float* w, const float* bias, int64_t N,
                              int C, int OC) = 0;
  virtual void matmul_backward(Stream& s, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                               const float* w, int64_t N, int C, int OC) = 0;
  virtual void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                                 const float* b, int64_t N, int C) = 0;
  virtual void layernorm_backward(Stream& s, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                  const float* w, const float* mean, const float* rstd, int64_t N, int C) = 0;
  // Causal attention. `att` is what the forward keeps for the backward:
  // the [B, NH, T, T] softmax probabilities where the table keeps them (an
  // activation like the others), else each query row's softmax statistic,
  // [B, NH, T] fp32, from which the backward recomputes the probabilities.
  bool attention_keeps_probabilities() const { return memory().attention_keeps_probabilities(); }
  virtual void attention_forward(Stream& s, float* out, float* att, float* scratch, const float* qkv, int B, int T,
                                 int C, int NH) = 0;
  virtual void attention_backward(Stream& s, float* dqkv, const float* dout, const float* qkv, const float* att,
                                  float* scratch, int B, int T, int C, int NH) = 0;
  // Floats of attention's scratch (forward and backward) for B sequences
  // of T, NH heads.
  int64_t attention_scratch_floats(int B, int T, int NH) const { return memory().attention_scratch_floats(B, T, NH); }
  // What the table's work needs of memory (kernel_memory.h).
  virtual KernelMemory memory() const = 0;
  virtual void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout, int64_t n) = 0;
  virtual void residual_forward(Stream& s, float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                 int B, int T, int C) = 0;
  virtual void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                  int B, int T, int C) = 0;

  // The LM head with fused softmax and cross-entropy.
  virtual void classifier_logits(Stream& s, float* logits, const float* inp, int64_t inp_stride, const float* wte,
                                 int64_t rows, int C, int V) = 0;
  virtual void classifier_forward_backward(Stream& s, const ClassifierArgs& a) = 0;

  // Casts: fp32 values rounded in place to what `t` holds; fp32 to and
  // from another float type (kF32 copies).
  virtual void round_to(Stream& s, DType t, float* x, int64_t n) = 0;
  virtual void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) = 0;
  virtual void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) = 0;

  // Reductions to one double at *out: the sum in index order; the sum of
  // squares as cpu::sum_squares orders it (not finite on overflow).
  virtual void sum(Stream& s, const double* x, int64_t n, double* out) = 0;
  virtual void sum_squares(Stream& s, const float* x, int64_t n, double* out) = 0;
  // Gradient accumulation: dst[i] += src[i].
  virtual void add(Stream& s, float* dst, const float* src, int64_t n) = 0;
  // x[i] *= a.
  virtual void scale(Stream& s, float* x, float a, int64_t n) = 0;
  // Dropout: y[i] = x[i] / (1 - p) where element i is kept, else 0; kept
  // when the draw for (seed, i) (cuda/pointwise_body.h) is at least p, so
  // the same seed gives the same mask wherever it runs. y may be x.
  virtual void dropout(Stream& s, float* y, const float* x, int64_t n, float p, uint64_t seed) = 0;

  // The optimizer: one Adam/AdamW update of a tensor's fp32 masters, its
  // states (fp32, or 8-bit in blocks) and its optional 16-bit copy, with
  // the math of cpu/adam.h and cpu/adam8bit.h.
  virtual void adam(Stream& s, const AdamTensor& t, const AdamStep& step) = 0;
  virtual void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) = 0;

  // Frozen 4-bit weights: out[i] = weight i of t (cpu/nf4.h), in fp32.
  virtual void nf4_dequantize(Stream& s, const Nf4Tensor& t, float* out) = 0;
};

// The table of `device`'s kind; it must not outlive the device.
absl::StatusOr<std::unique_ptr<Kernels>> kernels_for(Device& device);
// What that table's work needs of memory, without making it.
KernelMemory kernel_memory_for(const Device& device);

}  // namespace zerod
