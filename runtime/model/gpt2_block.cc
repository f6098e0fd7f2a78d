// GPT-2's block (block.h): x + attn(ln_1(x)) with q, k and v from one
// product with a bias, then h + mlp(ln_2(h)) with a GELU between its two
// products; LayerNorm after the last block.
#include "runtime/model/block.h"

namespace zerod {
namespace {

class Gpt2Block : public Block {
 public:
  void forward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
               const ForwardBuffers& fb, void* out) const override;
  void backward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                const LayerGrads& g, void* dres, const BackwardBuffers& bb) const override;
  void final_norm_forward(const BlockPass& p, const GlobalWeights& g, const void* x, void* out, float* mean,
                          float* rstd) const override {
    p.k.layernorm_forward(p.s, out, mean, rstd, x, g.lnfw, g.lnfb, p.d.N, p.d.C);
  }
  void final_norm_backward(const BlockPass& p, const GlobalWeights& g, const GlobalGrads& gg, void* dx, const void* dy,
                           const void* x, const float* mean, const float* rstd) const override {
    p.k.layernorm_backward(p.s, dx, gg.lnfw, gg.lnfb, dy, x, g.lnfw, mean, rstd, p.d.N, p.d.C);
  }
};

void Gpt2Block::forward(const BlockPass& pass, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                        const ForwardBuffers& fb, void* out) const {
  Kernels& k = pass.k;
  Stream& s = pass.s;
  const Dims& d = pass.d;
  void* const proj = fb.proj;
  float* const attn_scratch = fb.attn_scratch;
  void* const lora_scratch = fb.lora;
  const DType rnd_to = fb.rnd_to;
  const int C = d.C;
  const int64_t N = d.N;
  auto rnd = [&](void* q, int64_t n) { round_operands(k, s, rnd_to, q, n); };
  auto rnd_field = [&](ActField f) { rnd(a.f[f], a.n[f]); };
  auto adapt = [&](int t, const void* in, void* y, int n_in, int n_out) {
    if (w.lora[t].a) {
      lora_forward(k, s, {N, n_in, n_out}, w.lora[t], in, y, a.f[kLoraU + t], lora_scratch, rnd_to,
                   lora_dropout(d, l, t));
    }
  };
  k.layernorm_forward(s, a.f[kLn1], fp32(a, kLn1Mean), fp32(a, kLn1Rstd), x, w.ln1w, w.ln1b, N, C);
  rnd_field(kLn1);
  k.matmul_forward(s, a.f[kQkv], a.f[kLn1], w.qkvw, w.qkvb, N, C, 3 * C);
  adapt(kLoraCAttn, a.f[kLn1], a.f[kQkv], C, 3 * C);
  rnd_field(kQkv);
  k.attention_forward(s, a.f[kAtty], fp32(a, kAttStats), attn_scratch, a.f[kQkv], d.B, d.T, C, d.NH, d.NH, d.pos);
  rnd_field(kAtty);
  k.matmul_forward(s, proj, a.f[kAtty], w.attprojw, w.attprojb, N, C, C);
  adapt(kLoraAttnCProj, a.f[kAtty], proj, C, C);
  rnd(proj, N * C);
  if (rnd_to != DType::kF32) {  // the sum is rounded before its LayerNorm
    k.residual_forward(s, a.f[kRes2], x, proj, N * C);
    rnd_field(kRes2);
    k.layernorm_forward(s, a.f[kLn2], fp32(a, kLn2Mean), fp32(a, kLn2Rstd), a.f[kRes2], w.ln2w, w.ln2b, N, C);
  } else {
    k.residual_layernorm_forward(s, a.f[kRes2], a.f[kLn2], fp32(a, kLn2Mean), fp32(a, kLn2Rstd), x, proj, w.ln2w,
                                 w.ln2b, N, C);
  }
  rnd_field(kLn2);
  // The table may fuse the product and its GELU where nothing comes
  // between them: no adapter's share, no rounding of the product.
  if (w.lora[kLoraCFc].a || rnd_to != DType::kF32) {
    k.matmul_forward(s, a.f[kFch], a.f[kLn2], w.fcw, w.fcb, N, C, 4 * C);
    adapt(kLoraCFc, a.f[kLn2], a.f[kFch], C, 4 * C);
    rnd_field(kFch);
    k.gelu_forward(s, a.f[kFchGelu], a.f[kFch], N * 4 * C);
  } else {
    k.matmul_gelu_forward(s, a.f[kFchGelu], a.f[kFch], a.f[kLn2], w.fcw, w.fcb, N, C, 4 * C);
  }
  rnd_field(kFchGelu);
  if (!out) {
    // Recomputing: the last product's adapter input is all backward needs.
    const LoraWeights& last = w.lora[kLoraMlpCProj];
    if (last.a) {
      lora_input(k, s, {N, 4 * C, C}, last, a.f[kFchGelu], a.f[kLoraU + int{kLoraMlpCProj}], rnd_to,
                 lora_dropout(d, l, kLoraMlpCProj), lora_scratch);
    }
    return;
  }
  k.matmul_forward(s, proj, a.f[kFchGelu], w.fcprojw, w.fcprojb, N, 4 * C, C);
  adapt(kLoraMlpCProj, a.f[kFchGelu], proj, 4 * C, C);
  rnd(proj, N * C);
  k.residual_forward(s, out, a.f[kRes2], proj, N * C);
  rnd(out, N * C);
}

void Gpt2Block::backward(const BlockPass& pass, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                         const LayerGrads& g, void* dres, const BackwardBuffers& bb) const {
  Kernels& k = pass.k;
  Stream& s = pass.s;
  const Dims& d = pass.d;
  const int C = d.C;
  const int64_t N = d.N;
  auto adapt = [&](int t, const void* in, const void* dy, void* dx, int n_in, int n_out) {
    if (!w.lora[t].a) return;
    lora_backward(k, s, {N, n_in, n_out}, w.lora[t], g.lora[t], in, a.f[kLoraU + t], dy, dx,
                  at(bb.lora, N * bb.lora_wide, bb.op_bytes), bb.lora, lora_dropout(d, l, t));
  };
  if (w.lora[kLoraMlpCProj].a) {  // its share comes before the GELU's backward
    k.matmul_backward(s, bb.dfch, g.fcprojw, g.fcprojb, dres, a.f[kFchGelu], w.fcprojw, N, 4 * C, C);
    adapt(kLoraMlpCProj, a.f[kFchGelu], dres, bb.dfch, 4 * C, C);
    k.gelu_backward(s, bb.dfch, a.f[kFch], bb.dfch, N * 4 * C);
  } else {
    k.matmul_backward_gelu(s, bb.dfch, g.fcprojw, g.fcprojb, dres, a.f[kFch], a.f[kFchGelu], w.fcprojw, N, 4 * C, C);
  }
  k.matmul_backward(s, bb.dbuf, g.fcw, g.fcb, bb.dfch, a.f[kLn2], w.fcw, N, C, 4 * C);
  adapt(kLoraCFc, a.f[kLn2], bb.dfch, bb.dbuf, C, 4 * C);
  k.layernorm_backward(s, dres, g.ln2w, g.ln2b, bb.dbuf, a.f[kRes2], w.ln2w, fp32(a, kLn2Mean), fp32(a, kLn2Rstd), N,
                       C);
  k.matmul_backward(s, bb.dbuf, g.attprojw, g.attprojb, dres, a.f[kAtty], w.attprojw, N, C, C);
  adapt(kLoraAttnCProj, a.f[kAtty], dres, bb.dbuf, C, C);
  k.attention_backward(s, bb.dqkv, bb.dbuf, a.f[kQkv], a.f[kAtty], fp32(a, kAttStats), bb.attn_scratch, d.B, d.T, C,
                       d.NH, d.NH, bb.rounding, d.pos);
  k.matmul_backward(s, bb.dbuf, g.qkvw, g.qkvb, bb.dqkv, a.f[kLn1], w.qkvw, N, C, 3 * C);
  adapt(kLoraCAttn, a.f[kLn1], bb.dqkv, bb.dbuf, C, 3 * C);
  k.layernorm_backward(s, dres, g.ln1w, g.ln1b, bb.dbuf, x, w.ln1w, fp32(a, kLn1Mean), fp32(a, kLn1Rstd), N, C);
}

}  // namespace

std::unique_ptr<Block> gpt2_block() { return std::make_unique<Gpt2Block>(); }

}  // namespace zerod
