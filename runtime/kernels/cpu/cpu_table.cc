// The CPU's kernel table: each op runs cpu:: on the stream, in its order.
#include "runtime/kernels/cpu/cpu_table.h"

#include "runtime/core/cpu_device.h"

namespace zerod {
namespace {

class CpuKernels : public Kernels {
 public:
  explicit CpuKernels(CpuIsa isa) : isa_(isa) {}

  void matmul_forward(Stream& s, float* out, const float* inp, const float* w, const float* bias, int64_t N, int C,
                      int OC) override {
    CpuDevice::launch(s, [=] { cpu::matmul_forward(out, inp, w, bias, N, C, OC); });
  }
  void matmul_backward(Stream& s, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                       const float* w, int64_t N, int C, int OC) override {
    CpuDevice::launch(s, [=] { cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC); });
  }
  void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int C) override {
    CpuDevice::launch(s, [=] { cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C); });
  }
  void layernorm_backward(Stream& s, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N, int C) override {
    CpuDevice::launch(s, [=] { cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
  }
  KernelMemory memory() const override { return cpu_kernel_memory(); }
  void attention_forward(Stream& s, float* out, float* att, float*, const float* qkv, int B, int T, int C,
                         int NH) override {
    CpuDevice::launch(s, [=] { cpu::attention_forward(out, att, qkv, B, T, C, NH); });
  }
  void attention_backward(Stream& s, float* dqkv, const float* dout, const float* qkv, const float* att,
                          float* scratch, int B, int T, int C, int NH) override {
    CpuDevice::launch(s, [=] { cpu::attention_backward(dqkv, dout, qkv, att, scratch, B, T, C, NH); });
  }
  void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::gelu_forward(out, inp, n); });
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::gelu_backward(dinp, inp, dout, n); });
  }
  void residual_forward(Stream& s, float* out, const float* a, const float* b, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::residual_forward(out, a, b, n); });
  }
  void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                         int T, int C) override {
    CpuDevice::launch(s, [=] { cpu::embedding_forward(out, tokens, wte, wpe, B, T, C); });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                          int C) override {
    CpuDevice::launch(s, [=] { cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void classifier_logits(Stream& s, float* logits, const float* inp, int64_t inp_stride, const float* wte,
                         int64_t rows, int C, int V) override {
    CpuDevice::launch(s, [=] { cpu::classifier_logits(logits, inp, inp_stride, wte, rows, C, V); });
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    CpuDevice::launch(s, [a] { cpu::classifier_forward_backward(a); });
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override {
    if (t == DType::kF32) return;
    CpuDevice::launch(s, [=] { zerod::round_to(t, x, n); });
  }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    CpuDevice::launch(s, [=] { zerod::convert_from_f32(to, src, dst, n); });
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    CpuDevice::launch(s, [=] { zerod::convert_to_f32(from, src, dst, n); });
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override {
    CpuDevice::launch(s, [=] { *out = cpu::sum(x, n); });
  }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    CpuDevice::launch(s, [=] { *out = cpu::sum_squares(x, n); });
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::residual_forward(dst, dst, src, n); });
  }
  void scale(Stream& s, float* x, float a, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::scale(x, a, n); });
  }
  void dropout(Stream& s, float* y, const float* x, int64_t n, float p, uint64_t seed) override {
    CpuDevice::launch(s, [=] { cpu::dropout(y, x, n, p, seed); });
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override {
    CpuDevice::launch(s, [=, isa = isa_] { adam_update(t, step, isa); });
  }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    CpuDevice::launch(s, [=, isa = isa_] { adam8bit_update(t, step, isa); });
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, float* out) override {
    CpuDevice::launch(s, [=] { zerod::nf4_dequantize(t, out); });
  }

 private:
  const CpuIsa isa_;  // of the optimizer kernels
};

}  // namespace

std::unique_ptr<Kernels> cpu_kernels(CpuIsa isa) { return std::make_unique<CpuKernels>(isa); }

}  // namespace zerod
