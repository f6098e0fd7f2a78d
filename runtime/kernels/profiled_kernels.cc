#include "runtime/kernels/profiled_kernels.h"

#include <utility>

namespace zerod {
namespace {

// Ops that take a stream are timed there; the table's questions pass through.
class ProfiledKernels : public Kernels {
 public:
  ProfiledKernels(std::unique_ptr<Kernels> inner, Profiler& profiler) : inner_(std::move(inner)), profiler_(profiler) {}

  void set_forward_operands(DType t) override { inner_->set_forward_operands(t); }
  void matmul_forward(Stream& s, float* out, const float* inp, const float* w, const float* bias, int64_t N, int C,
                      int OC) override {
    auto span = Profiler::device_span(&profiler_, s, "matmul_forward");
    inner_->matmul_forward(s, out, inp, w, bias, N, C, OC);
  }
  void matmul_backward(Stream& s, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                       const float* w, int64_t N, int C, int OC) override {
    auto span = Profiler::device_span(&profiler_, s, "matmul_backward");
    inner_->matmul_backward(s, dinp, dw, dbias, dout, inp, w, N, C, OC);
  }
  void layernorm_forward(Stream& s, float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int C) override {
    auto span = Profiler::device_span(&profiler_, s, "layernorm_forward");
    inner_->layernorm_forward(s, out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(Stream& s, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N, int C) override {
    auto span = Profiler::device_span(&profiler_, s, "layernorm_backward");
    inner_->layernorm_backward(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  KernelMemory memory() const override { return inner_->memory(); }
  void attention_forward(Stream& s, float* out, float* att, float* scratch, const float* qkv, int B, int T, int C,
                         int NH) override {
    auto span = Profiler::device_span(&profiler_, s, "attention_forward");
    inner_->attention_forward(s, out, att, scratch, qkv, B, T, C, NH);
  }
  void attention_backward(Stream& s, float* dqkv, const float* dout, const float* qkv, const float* att, float* scratch,
                          int B, int T, int C, int NH) override {
    auto span = Profiler::device_span(&profiler_, s, "attention_backward");
    inner_->attention_backward(s, dqkv, dout, qkv, att, scratch, B, T, C, NH);
  }
  void gelu_forward(Stream& s, float* out, const float* inp, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "gelu_forward");
    inner_->gelu_forward(s, out, inp, n);
  }
  void gelu_backward(Stream& s, float* dinp, const float* inp, const float* dout, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "gelu_backward");
    inner_->gelu_backward(s, dinp, inp, dout, n);
  }
  void residual_forward(Stream& s, float* out, const float* a, const float* b, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "residual_forward");
    inner_->residual_forward(s, out, a, b, n);
  }
  void embedding_forward(Stream& s, float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
    auto span = Profiler::device_span(&profiler_, s, "embedding_forward");
    inner_->embedding_forward(s, out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                          int C) override {
    auto span = Profiler::device_span(&profiler_, s, "embedding_backward");
    inner_->embedding_backward(s, dwte, dwpe, dout, tokens, B, T, C);
  }
  void classifier_logits(Stream& s, float* logits, const float* inp, int64_t inp_stride, const float* wte, int64_t rows,
                         int C, int V) override {
    auto span = Profiler::device_span(&profiler_, s, "classifier_logits");
    inner_->classifier_logits(s, logits, inp, inp_stride, wte, rows, C, V);
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    auto span = Profiler::device_span(&profiler_, s, "classifier_forward_backward");
    inner_->classifier_forward_backward(s, a);
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "round_to");
    inner_->round_to(s, t, x, n);
  }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "convert_from_f32");
    inner_->convert_from_f32(s, to, src, dst, n);
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "convert_to_f32");
    inner_->convert_to_f32(s, from, src, dst, n);
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override {
    auto span = Profiler::device_span(&profiler_, s, "sum");
    inner_->sum(s, x, n, out);
  }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    auto span = Profiler::device_span(&profiler_, s, "sum_squares");
    inner_->sum_squares(s, x, n, out);
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "add");
    inner_->add(s, dst, src, n);
  }
  void scale(Stream& s, float* x, float a, int64_t n) override {
    auto span = Profiler::device_span(&profiler_, s, "scale");
    inner_->scale(s, x, a, n);
  }
  void dropout(Stream& s, float* y, const float* x, int64_t n, float p, uint64_t seed) override {
    auto span = Profiler::device_span(&profiler_, s, "dropout");
    inner_->dropout(s, y, x, n, p, seed);
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override {
    auto span = Profiler::device_span(&profiler_, s, "adam");
    inner_->adam(s, t, step);
  }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    auto span = Profiler::device_span(&profiler_, s, "adam8bit");
    inner_->adam8bit(s, t, step);
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, float* out) override {
    auto span = Profiler::device_span(&profiler_, s, "nf4_dequantize");
    inner_->nf4_dequantize(s, t, out);
  }

 private:
  std::unique_ptr<Kernels> inner_;
  Profiler& profiler_;
};

}  // namespace

std::unique_ptr<Kernels> profiled_kernels(std::unique_ptr<Kernels> inner, Profiler& profiler) {
  return std::make_unique<ProfiledKernels>(std::move(inner), profiler);
}

}  // namespace zerod
