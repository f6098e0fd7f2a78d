// The CPU's kernel table: each op runs cpu:: on the stream, in its order.
// Its operands are fp32 (kernels.h), so each `void*` is a float array.
#include "runtime/kernels/cpu_table.h"

#include "runtime/core/cpu_device.h"

namespace zerod {
namespace {

float* f32(void* p) { return static_cast<float*>(p); }
const float* f32(const void* p) { return static_cast<const float*>(p); }

class CpuKernels : public Kernels {
 public:
  explicit CpuKernels(CpuIsa isa) : isa_(isa) {}

  DType operand_type() const override { return DType::kF32; }
  void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                      int OC) override {
    CpuDevice::launch(s, [=] { cpu::matmul_forward(f32(out), f32(inp), f32(w), f32(bias), N, C, OC); });
  }
  void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       int64_t N, int C, int OC) override {
    CpuDevice::launch(s, [=] { cpu::matmul_backward(f32(dinp), dw, dbias, f32(dout), f32(inp), f32(w), N, C, OC); });
  }
  void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w, const void* b,
                         int64_t N, int C) override {
    CpuDevice::launch(s, [=] { cpu::layernorm_forward(f32(out), mean, rstd, f32(inp), f32(w), f32(b), N, C); });
  }
  void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp, const void* w,
                          const float* mean, const float* rstd, int64_t N, int C) override {
    CpuDevice::launch(
        s, [=] { cpu::layernorm_backward(f32(dinp), dw, db, f32(dout), f32(inp), f32(w), mean, rstd, N, C); });
  }
  KernelMemory memory() const override { return cpu_kernel_memory(); }
  void attention_forward(Stream& s, void* out, float* stats, float* scratch, const void* qkv, int B, int T, int C,
                         int NH, int KV, const int32_t* pos = nullptr) override {
    CpuDevice::launch(s, [=] { cpu::attention_forward(f32(out), stats, scratch, f32(qkv), B, T, C, NH, KV, pos); });
  }
  void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void*, const float* stats,
                          float* scratch, int B, int T, int C, int NH, int KV, DType rounded,
                          const int32_t* pos = nullptr) override {
    CpuDevice::launch(s, [=] {
      cpu::attention_backward(f32(dqkv), f32(dout), f32(qkv), stats, scratch, B, T, C, NH, KV, rounded, pos);
    });
  }
  void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                       float eps) override {
    CpuDevice::launch(s, [=] { cpu::rmsnorm_forward(f32(out), rstd, f32(inp), f32(w), N, C, eps); });
  }
  void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int64_t N, int C) override {
    CpuDevice::launch(s, [=] { cpu::rmsnorm_backward(f32(dinp), dw, f32(dout), f32(inp), f32(w), rstd, N, C); });
  }
  void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) override {
    CpuDevice::launch(s, [=] { cpu::swiglu_forward(f32(out), f32(inp), N, F); });
  }
  void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    CpuDevice::launch(s, [=] { cpu::swiglu_backward(f32(dinp), f32(inp), f32(dout), N, F); });
  }
  void rope_forward(Stream& s, void* qkv, const float* table, const RopeShape& shape, int64_t N) override {
    CpuDevice::launch(s, [=] { cpu::rope_forward(f32(qkv), table, shape, N); });
  }
  void rope_backward(Stream& s, void* dqkv, const float* table, const RopeShape& shape, int64_t N) override {
    CpuDevice::launch(s, [=] { cpu::rope_backward(f32(dqkv), table, shape, N); });
  }
  void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::gelu_forward(f32(out), f32(inp), n); });
  }
  void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::gelu_backward(f32(dinp), f32(inp), f32(dout), n); });
  }
  void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::residual_forward(f32(out), f32(a), f32(b), n); });
  }
  void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) override {
    CpuDevice::launch(s, [=] { cpu::take_columns(f32(out), f32(x), ld, c0, N, n); });
  }
  void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) override {
    CpuDevice::launch(s, [=] { cpu::add_columns(f32(y), ld, c0, f32(t), N, n); });
  }
  void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T,
                         int C, const int32_t* pos = nullptr) override {
    CpuDevice::launch(s, [=] { cpu::embedding_forward(f32(out), tokens, f32(wte), f32(wpe), B, T, C, pos); });
  }
  // Walks the positions in order, column by column: the orders are not needed.
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens, const int32_t*,
                          int B, int T, int C, const int32_t* pos = nullptr, const int32_t* = nullptr) override {
    CpuDevice::launch(s, [=] { cpu::embedding_backward(dwte, dwpe, f32(dout), tokens, B, T, C, pos); });
  }
  void classifier_logits(Stream& s, float* logits, const void* inp, int64_t inp_stride, const void* wte, int64_t rows,
                         int C, int V) override {
    CpuDevice::launch(s, [=] { cpu::classifier_logits(logits, f32(inp), inp_stride, f32(wte), rows, C, V); });
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
  void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                     double* sumsq) override {
    CpuDevice::launch(s, [=] { update_factor_of_sums(sums, n, loss_scale, clip, factor, sumsq); });
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::residual_forward(dst, dst, src, n); });
  }
  void scale(Stream& s, void* x, float a, int64_t n) override {
    CpuDevice::launch(s, [=] { cpu::scale(f32(x), a, n); });
  }
  void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) override {
    CpuDevice::launch(s, [=] { cpu::dropout(f32(y), f32(x), n, p, seed); });
  }
  void dropout_add(Stream& s, void* y, void* t, int64_t n, float p, uint64_t seed) override {
    CpuDevice::launch(s, [=] { cpu::dropout_add(f32(y), f32(t), n, p, seed); });
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override {
    CpuDevice::launch(s, [=, isa = isa_] {
      AdamStep k = step;
      if (resolve_grad_scale(k)) adam_update(t, k, isa);
    });
  }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    CpuDevice::launch(s, [=, isa = isa_] {
      AdamStep k = step;
      if (resolve_grad_scale(k)) adam8bit_update(t, k, isa);
    });
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) override {
    CpuDevice::launch(s, [=] { nf4_dequantize_transposed(t, d.rows, d.cols, d.ld, static_cast<float*>(out)); });
  }

 private:
  const CpuIsa isa_;  // of the optimizer kernels
};

}  // namespace

std::unique_ptr<Kernels> cpu_kernels(CpuIsa isa) { return std::make_unique<CpuKernels>(isa); }

}  // namespace zerod
