// The Llama family's block (block.h): x + o_proj(attention(rope(qkv(
// rmsnorm(x))))) with grouped-query attention, then h + down(swiglu(
// gate_up(rmsnorm(h)))); RMSNorm after the last block. No biases but
// Qwen2's on q, k and v.
#include "runtime/model/block.h"

namespace zerod {
namespace {

class LlamaBlock : public Block {
 public:
  void forward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
               const ForwardBuffers& fb, void* out) const override;
  void backward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                const LayerGrads& g, void* dres, const BackwardBuffers& bb) const override;
  void final_norm_forward(const BlockPass& p, const GlobalWeights& g, const void* x, void* out, float*,
                          float* rstd) const override {
    p.k.rmsnorm_forward(p.s, out, rstd, x, g.lnfw, p.d.N, p.d.C, p.d.llama.eps);
  }
  void final_norm_backward(const BlockPass& p, const GlobalWeights& g, const GlobalGrads& gg, void* dx, const void* dy,
                           const void* x, const float*, const float* rstd) const override {
    p.k.rmsnorm_backward(p.s, dx, gg.lnfw, dy, x, g.lnfw, rstd, p.d.N, p.d.C);
  }
};

// q, k and v (gate and up) adapters add to their columns of the fused
// product.
void LlamaBlock::forward(const BlockPass& pass, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                         const ForwardBuffers& fb, void* out) const {
  Kernels& k = pass.k;
  Stream& s = pass.s;
  const Dims& d = pass.d;
  void* const proj = fb.proj;
  float* const attn_scratch = fb.attn_scratch;
  void* const lora_scratch = fb.lora;
  const DType rnd_to = fb.rnd_to;
  const int C = d.C, F = d.llama.F;
  const int64_t N = d.N;
  const LlamaParts& p = d.llama;
  auto rnd = [&](void* q, int64_t n) { round_operands(k, s, rnd_to, q, n); };
  auto rnd_field = [&](ActField f) { rnd(a.f[f], a.n[f]); };
  auto shape = [&](int t) {
    const LoraTargetDims& td = p.lora[t];
    return LoraShape{N, td.in, td.out, td.col0, td.width};
  };
  auto adapt = [&](int t, const void* in, void* y) {
    if (w.lora[t].a) {
      lora_forward(k, s, shape(t), w.lora[t], in, y, a.f[kLoraU + t], lora_scratch, rnd_to, lora_dropout(d, l, t));
    }
  };
  const int64_t W = p.shape.width();  // a row of q, k and v
  k.rmsnorm_forward(s, a.f[kLn1], fp32(a, kLn1Rstd), x, w.ln1w, N, C, p.eps);
  rnd_field(kLn1);
  k.matmul_forward(s, a.f[kQkv], a.f[kLn1], w.qkvw, w.qkvb, N, C, static_cast<int>(W));
  for (int t : {kLoraQ, kLoraK, kLoraV}) adapt(t, a.f[kLn1], a.f[kQkv]);
  rnd_field(kQkv);
  // Attention's input, and what is saved: q and k turned.
  k.rope_forward(s, a.f[kQkv], p.rope, p.shape, N);
  rnd_field(kQkv);
  k.attention_forward(s, a.f[kAtty], fp32(a, kAttStats), attn_scratch, a.f[kQkv], d.B, d.T, C, d.NH, p.shape.KV, d.pos);
  rnd_field(kAtty);
  k.matmul_forward(s, proj, a.f[kAtty], w.attprojw, nullptr, N, C, C);
  adapt(kLoraO, a.f[kAtty], proj);
  rnd(proj, N * C);
  if (rnd_to != DType::kF32) {  // the sum is rounded before its RMSNorm
    k.residual_forward(s, a.f[kRes2], x, proj, N * C);
    rnd_field(kRes2);
    k.rmsnorm_forward(s, a.f[kLn2], fp32(a, kLn2Rstd), a.f[kRes2], w.ln2w, N, C, p.eps);
  } else {
    k.residual_rmsnorm_forward(s, a.f[kRes2], a.f[kLn2], fp32(a, kLn2Rstd), x, proj, w.ln2w, N, C, p.eps);
  }
  rnd_field(kLn2);
  k.matmul_forward(s, a.f[kFch], a.f[kLn2], w.fcw, nullptr, N, C, 2 * F);
  for (int t : {kLoraGate, kLoraUp}) adapt(t, a.f[kLn2], a.f[kFch]);
  rnd_field(kFch);
  k.swiglu_forward(s, a.f[kFchGelu], a.f[kFch], N, F);
  rnd_field(kFchGelu);
  if (!out) {
    // Recomputing: down_proj's adapter input is all backward needs of the rest.
    if (w.lora[kLoraDown].a) {
      lora_input(k, s, shape(kLoraDown), w.lora[kLoraDown], a.f[kFchGelu], a.f[kLoraU + int{kLoraDown}], rnd_to,
                 lora_dropout(d, l, kLoraDown), lora_scratch);
    }
    return;
  }
  k.matmul_forward(s, proj, a.f[kFchGelu], w.fcprojw, nullptr, N, F, C);
  adapt(kLoraDown, a.f[kFchGelu], proj);
  rnd(proj, N * C);
  k.residual_forward(s, out, a.f[kRes2], proj, N * C);
  rnd(out, N * C);
}

void LlamaBlock::backward(const BlockPass& pass, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                          const LayerGrads& g, void* dres, const BackwardBuffers& bb) const {
  Kernels& k = pass.k;
  Stream& s = pass.s;
  const Dims& d = pass.d;
  const int C = d.C, F = d.llama.F;
  const int64_t N = d.N;
  const LlamaParts& p = d.llama;
  auto adapt = [&](int t, const void* in, const void* dy, void* dx) {
    if (!w.lora[t].a) return;
    const LoraTargetDims& td = p.lora[t];
    lora_backward(k, s, {N, td.in, td.out, td.col0, td.width}, w.lora[t], g.lora[t], in, a.f[kLoraU + t], dy, dx,
                  at(bb.lora, N * bb.lora_wide, bb.op_bytes), bb.lora, lora_dropout(d, l, t));
  };
  void* dswiglu = at(bb.dfch, N * 2 * F, bb.op_bytes);
  k.matmul_backward(s, dswiglu, g.fcprojw, nullptr, dres, a.f[kFchGelu], w.fcprojw, N, F, C);
  adapt(kLoraDown, a.f[kFchGelu], dres, dswiglu);
  k.swiglu_backward(s, bb.dfch, a.f[kFch], dswiglu, N, F);
  k.matmul_backward(s, bb.dbuf, g.fcw, nullptr, bb.dfch, a.f[kLn2], w.fcw, N, C, 2 * F);
  for (int t : {kLoraGate, kLoraUp}) adapt(t, a.f[kLn2], bb.dfch, bb.dbuf);
  k.rmsnorm_backward(s, dres, g.ln2w, bb.dbuf, a.f[kRes2], w.ln2w, fp32(a, kLn2Rstd), N, C);
  k.matmul_backward(s, bb.dbuf, g.attprojw, nullptr, dres, a.f[kAtty], w.attprojw, N, C, C);
  adapt(kLoraO, a.f[kAtty], dres, bb.dbuf);
  k.attention_backward(s, bb.dqkv, bb.dbuf, a.f[kQkv], a.f[kAtty], fp32(a, kAttStats), bb.attn_scratch, d.B, d.T, C,
                       d.NH, p.shape.KV, bb.rounding, d.pos);
  k.rope_backward(s, bb.dqkv, p.rope, p.shape, N);
  k.matmul_backward(s, bb.dbuf, g.qkvw, g.qkvb, bb.dqkv, a.f[kLn1], w.qkvw, N, C, static_cast<int>(p.shape.width()));
  for (int t : {kLoraQ, kLoraK, kLoraV}) adapt(t, a.f[kLn1], bb.dqkv, bb.dbuf);
  k.rmsnorm_backward(s, dres, g.ln1w, bb.dbuf, x, w.ln1w, fp32(a, kLn1Rstd), N, C);
}

}  // namespace

std::unique_ptr<Block> llama_block() { return std::make_unique<LlamaBlock>(); }

}  // namespace zerod
