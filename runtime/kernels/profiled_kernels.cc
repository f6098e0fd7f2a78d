#include "runtime/kernels/profiled_kernels.h"

#include <utility>

namespace zerod {
namespace {

// Ops that take a stream are timed there, and their launches counted; the
// table's questions pass through. A memory-bound op also counts the bytes
// it must move at the least (each operand read once, each result written
// once, an accumulated one read and written), so that the breakdown gives
// its rate against the memory's bandwidth; a product, attention and the
// head are bound by arithmetic and count none.
class ProfiledKernels : public Kernels {
 public:
  ProfiledKernels(std::unique_ptr<Kernels> inner, Profiler& profiler) : inner_(std::move(inner)), profiler_(profiler) {}

  DType operand_type() const override { return inner_->operand_type(); }
  int64_t launches() const override { return inner_->launches(); }
  void matmul_forward(Stream& s, void* out, const void* inp, const void* w, const void* bias, int64_t N, int C,
                      int OC) override {
    timed(s, "matmul_forward", [&] { inner_->matmul_forward(s, out, inp, w, bias, N, C, OC); });
  }
  void matmul_backward(Stream& s, void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       int64_t N, int C, int OC) override {
    timed(s, "matmul_backward", [&] { inner_->matmul_backward(s, dinp, dw, dbias, dout, inp, w, N, C, OC); });
  }
  void matmul_gelu_forward(Stream& s, void* out, void* pre, const void* inp, const void* w, const void* bias, int64_t N,
                           int C, int OC) override {
    timed(s, "matmul_gelu_forward", [&] { inner_->matmul_gelu_forward(s, out, pre, inp, w, bias, N, C, OC); });
  }
  void matmul_backward_gelu(Stream& s, void* dpre, float* dw, float* dbias, const void* dout, const void* pre,
                            const void* inp, const void* w, int64_t N, int C, int OC) override {
    timed(s, "matmul_backward_gelu",
          [&] { inner_->matmul_backward_gelu(s, dpre, dw, dbias, dout, pre, inp, w, N, C, OC); });
  }
  void layernorm_forward(Stream& s, void* out, float* mean, float* rstd, const void* inp, const void* w, const void* b,
                         int64_t N, int C) override {
    timed(s, "layernorm_forward", (2 * N * C + 2 * C) * ob() + 2 * N * 4,
          [&] { inner_->layernorm_forward(s, out, mean, rstd, inp, w, b, N, C); });
  }
  void residual_layernorm_forward(Stream& s, void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* w, const void* bias, int64_t N, int C) override {
    timed(s, "residual_layernorm_forward", (4 * N * C + 2 * C) * ob() + 2 * N * 4,
          [&] { inner_->residual_layernorm_forward(s, res, out, mean, rstd, a, b, w, bias, N, C); });
  }
  void layernorm_backward(Stream& s, void* dinp, float* dw, float* db, const void* dout, const void* inp, const void* w,
                          const float* mean, const float* rstd, int64_t N, int C) override {
    timed(s, "layernorm_backward", (4 * N * C + C) * ob() + 2 * N * 4 + ((dw ? 1 : 0) + (db ? 1 : 0)) * 2 * C * 4,
          [&] { inner_->layernorm_backward(s, dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
  }
  KernelMemory memory() const override { return inner_->memory(); }
  void attention_forward(Stream& s, void* out, float* stats, float* scratch, const void* qkv, int B, int T, int C,
                         int NH, int KV, const int32_t* pos = nullptr) override {
    timed(s, "attention_forward",
          [&] { inner_->attention_forward(s, out, stats, scratch, qkv, B, T, C, NH, KV, pos); });
  }
  void attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats,
                          float* scratch, int B, int T, int C, int NH, int KV, DType rounded,
                          const int32_t* pos = nullptr) override {
    timed(s, "attention_backward",
          [&] { inner_->attention_backward(s, dqkv, dout, qkv, out, stats, scratch, B, T, C, NH, KV, rounded, pos); });
  }

  void rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp, const void* w, int64_t N, int C,
                       float eps) override {
    timed(s, "rmsnorm_forward", (2 * N * C + C) * ob() + N * 4,
          [&] { inner_->rmsnorm_forward(s, out, rstd, inp, w, N, C, eps); });
  }
  void residual_rmsnorm_forward(Stream& s, void* res, void* out, float* rstd, const void* a, const void* b,
                                const void* w, int64_t N, int C, float eps) override {
    timed(s, "residual_rmsnorm_forward", (4 * N * C + C) * ob() + N * 4,
          [&] { inner_->residual_rmsnorm_forward(s, res, out, rstd, a, b, w, N, C, eps); });
  }
  void rmsnorm_backward(Stream& s, void* dinp, float* dw, const void* dout, const void* inp, const void* w,
                        const float* rstd, int64_t N, int C) override {
    timed(s, "rmsnorm_backward", (4 * N * C + C) * ob() + N * 4 + (dw ? 2 * C * 4 : 0),
          [&] { inner_->rmsnorm_backward(s, dinp, dw, dout, inp, w, rstd, N, C); });
  }
  void swiglu_forward(Stream& s, void* out, const void* inp, int64_t N, int F) override {
    timed(s, "swiglu_forward", 3 * N * F * ob(), [&] { inner_->swiglu_forward(s, out, inp, N, F); });
  }
  void swiglu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    timed(s, "swiglu_backward", 5 * N * F * ob(), [&] { inner_->swiglu_backward(s, dinp, inp, dout, N, F); });
  }
  void rope_forward(Stream& s, void* qkv, const float* table, const RopeShape& shape, int64_t N) override {
    timed(s, "rope_forward", rope_bytes(shape, N), [&] { inner_->rope_forward(s, qkv, table, shape, N); });
  }
  void rope_backward(Stream& s, void* dqkv, const float* table, const RopeShape& shape, int64_t N) override {
    timed(s, "rope_backward", rope_bytes(shape, N), [&] { inner_->rope_backward(s, dqkv, table, shape, N); });
  }
  void take_columns(Stream& s, void* out, const void* x, int64_t ld, int64_t c0, int64_t N, int n) override {
    timed(s, "take_columns", 2 * N * n * ob(), [&] { inner_->take_columns(s, out, x, ld, c0, N, n); });
  }
  void add_columns(Stream& s, void* y, int64_t ld, int64_t c0, const void* t, int64_t N, int n) override {
    timed(s, "add_columns", 3 * N * n * ob(), [&] { inner_->add_columns(s, y, ld, c0, t, N, n); });
  }
  // LoRA's products are narrow (r columns): bound by what they move.
  void lora_down(Stream& s, void* u, const void* x, const void* a, int64_t N, int in, int r, float scale) override {
    timed(s, "lora_down", (N * in + int64_t(in) * r + N * r) * ob(),
          [&] { inner_->lora_down(s, u, x, a, N, in, r, scale); });
  }
  void lora_up(Stream& s, void* y, int64_t ld, int64_t c0, const void* u, const void* b, int64_t N, int r, int out,
               void* scratch) override {
    timed(s, "lora_up", (N * r + int64_t(r) * out + 2 * N * out) * ob(),
          [&] { inner_->lora_up(s, y, ld, c0, u, b, N, r, out, scratch); });
  }
  void lora_up_backward(Stream& s, void* du, float* db, const void* dy, int64_t ld, int64_t c0, const void* u,
                        const void* b, int64_t N, int r, int out, float scale, void* scratch) override {
    timed(s, "lora_up_backward", (N * out + 2 * N * r + int64_t(r) * out) * ob() + int64_t(r) * out * 8,
          [&] { inner_->lora_up_backward(s, du, db, dy, ld, c0, u, b, N, r, out, scale, scratch); });
  }
  void lora_down_backward(Stream& s, void* dx, const void* du, const void* a, int64_t N, int in, int r,
                          void* scratch) override {
    timed(s, "lora_down_backward", (N * r + int64_t(in) * r + 2 * N * in) * ob(),
          [&] { inner_->lora_down_backward(s, dx, du, a, N, in, r, scratch); });
  }
  void gelu_forward(Stream& s, void* out, const void* inp, int64_t n) override {
    timed(s, "gelu_forward", 2 * n * ob(), [&] { inner_->gelu_forward(s, out, inp, n); });
  }
  void gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout, int64_t n) override {
    timed(s, "gelu_backward", 3 * n * ob(), [&] { inner_->gelu_backward(s, dinp, inp, dout, n); });
  }
  void residual_forward(Stream& s, void* out, const void* a, const void* b, int64_t n) override {
    timed(s, "residual_forward", 3 * n * ob(), [&] { inner_->residual_forward(s, out, a, b, n); });
  }
  void embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte, const void* wpe, int B, int T,
                         int C, const int32_t* pos = nullptr) override {
    const int64_t N = int64_t(B) * T;
    timed(s, "embedding_forward", N * (pos ? 8 : 4) + (2 * N * C + (wpe ? int64_t(T) * C : 0)) * ob(),
          [&] { inner_->embedding_forward(s, out, tokens, wte, wpe, B, T, C, pos); });
  }
  void embedding_backward(Stream& s, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                          const int32_t* order, int B, int T, int C, const int32_t* pos = nullptr,
                          const int32_t* pos_order = nullptr) override {
    timed(s, "embedding_backward",
          [&] { inner_->embedding_backward(s, dwte, dwpe, dout, tokens, order, B, T, C, pos, pos_order); });
  }
  void classifier_logits(Stream& s, float* logits, const void* inp, int64_t inp_stride, const void* wte, int64_t rows,
                         int C, int V) override {
    timed(s, "classifier_logits", [&] { inner_->classifier_logits(s, logits, inp, inp_stride, wte, rows, C, V); });
  }
  void classifier_forward_backward(Stream& s, const ClassifierArgs& a) override {
    timed(s, "classifier_forward_backward", [&] { inner_->classifier_forward_backward(s, a); });
  }
  void round_to(Stream& s, DType t, float* x, int64_t n) override {
    timed(s, "round_to", t == DType::kF32 ? 0 : 2 * n * 4, [&] { inner_->round_to(s, t, x, n); });  // fp32: none
  }
  void convert_from_f32(Stream& s, DType to, const float* src, void* dst, int64_t n) override {
    timed(s, "convert_from_f32", n * (4 + dtype_size(to)), [&] { inner_->convert_from_f32(s, to, src, dst, n); });
  }
  void convert_to_f32(Stream& s, DType from, const void* src, float* dst, int64_t n) override {
    timed(s, "convert_to_f32", n * (4 + dtype_size(from)), [&] { inner_->convert_to_f32(s, from, src, dst, n); });
  }
  void sum(Stream& s, const double* x, int64_t n, double* out) override {
    timed(s, "sum", n * 8, [&] { inner_->sum(s, x, n, out); });
  }
  void sum_squares(Stream& s, const float* x, int64_t n, double* out) override {
    timed(s, "sum_squares", n * 4, [&] { inner_->sum_squares(s, x, n, out); });
  }
  void sum_squares_tensors(Stream& s, absl::Span<const SquaresOf> ts) override {
    int64_t n = 0;
    for (const SquaresOf& t : ts) n += t.n;
    timed(s, "sum_squares", n * 4, [&] { inner_->sum_squares_tensors(s, ts); });
  }
  void update_factor(Stream& s, const double* sums, int n, double loss_scale, double clip, float* factor,
                     double* sumsq) override {
    timed(s, "update_factor", [&] { inner_->update_factor(s, sums, n, loss_scale, clip, factor, sumsq); });
  }
  void add(Stream& s, float* dst, const float* src, int64_t n) override {
    timed(s, "add", 3 * n * 4, [&] { inner_->add(s, dst, src, n); });
  }
  void scale(Stream& s, void* x, float a, int64_t n) override {
    timed(s, "scale", 2 * n * ob(), [&] { inner_->scale(s, x, a, n); });
  }
  void dropout(Stream& s, void* y, const void* x, int64_t n, float p, uint64_t seed) override {
    timed(s, "dropout", 2 * n * ob(), [&] { inner_->dropout(s, y, x, n, p, seed); });
  }
  void dropout_add(Stream& s, void* y, void* t, int64_t n, float p, uint64_t seed) override {
    timed(s, "dropout_add", 3 * n * ob(), [&] { inner_->dropout_add(s, y, t, n, p, seed); });
  }
  void adam(Stream& s, const AdamTensor& t, const AdamStep& step) override {
    timed(s, "adam", adam_bytes(t), [&] { inner_->adam(s, t, step); });
  }
  void adam8bit(Stream& s, const Adam8bitTensor& t, const AdamStep& step) override {
    timed(s, "adam8bit", [&] { inner_->adam8bit(s, t, step); });
  }
  void adam_tensors(Stream& s, absl::Span<const AdamTensor> ts, absl::Span<const AdamStep> steps) override {
    int64_t bytes = 0;
    for (const AdamTensor& t : ts) bytes += adam_bytes(t);
    timed(s, "adam_tensors", bytes, [&] { inner_->adam_tensors(s, ts, steps); });
  }
  void adam8bit_tensors(Stream& s, absl::Span<const Adam8bitTensor> ts, absl::Span<const AdamStep> steps) override {
    timed(s, "adam8bit_tensors", [&] { inner_->adam8bit_tensors(s, ts, steps); });
  }
  void nf4_dequantize(Stream& s, const Nf4Tensor& t, const Nf4Transpose& d, void* out) override {
    // The 4-bit matrix read (codes, absmax codes, group absmax values), the operands written.
    const int64_t bytes = static_cast<int64_t>(nf4_sizes(t.n).bytes()) + d.rows * d.cols * ob();
    timed(s, "nf4_dequantize", bytes, [&] { inner_->nf4_dequantize(s, t, d, out); });
  }

 private:
  // op() timed on s as `what`, with the launches it made and the bytes
  // it moves.
  template <class F>
  void timed(Stream& s, const char* what, int64_t bytes, F op) {
    const int64_t before = inner_->launches();
    {
      auto span = Profiler::device_span(&profiler_, s, what, static_cast<uint64_t>(bytes));
      op();
    }
    profiler_.add_launches(what, inner_->launches() - before);
  }
  template <class F>
  void timed(Stream& s, const char* what, F op) {
    timed(s, what, 0, op);
  }
  int64_t ob() const { return dtype_size(inner_->operand_type()); }
  // q and k read and turned in place, and the table.
  int64_t rope_bytes(const RopeShape& shape, int64_t N) const {
    return 2 * N * (shape.NH + shape.KV) * shape.hd * ob() + int64_t(shape.T) * shape.hd * 4;
  }
  // The fp32 masters and both moments read and written, the gradient read,
  // the 16-bit copy written.
  static int64_t adam_bytes(const AdamTensor& t) {
    return t.n * (6 * 4 + dtype_size(t.grad_type) + (t.param16 ? dtype_size(t.param16_type) : 0));
  }

  std::unique_ptr<Kernels> inner_;
  Profiler& profiler_;
};

}  // namespace

std::unique_ptr<Kernels> profiled_kernels(std::unique_ptr<Kernels> inner, Profiler& profiler) {
  return std::make_unique<ProfiledKernels>(std::move(inner), profiler);
}

}  // namespace zerod
