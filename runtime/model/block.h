// A transformer block of one architecture, forward and backward, and the
// final norm after the last one: the model (gpt.cc) holds one, chosen by
// block_for from its config, and runs every layer through it. GPT-2's
// (gpt2_block.cc): LayerNorm, attention with biases, GELU MLP; the Llama
// family's (llama_block.cc): RMSNorm, rotary positions and grouped-query
// attention, SwiGLU MLP. Both through the kernel table only; what each
// keeps for its backward is a LayerActs of the fields below.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/core/dtype.h"
#include "runtime/kernels/kernels.h"
#include "runtime/kernels/ops/hd.h"
#include "runtime/model/gpt_config.h"
#include "runtime/model/lora.h"
#include "runtime/model/weights.h"

namespace zerod {

// Activations one block saves for its backward. The operands come first;
// the per-row statistics (LayerNorm's and attention's) stay fp32.
// kLoraU + t holds LoRA target t's s·(x·A) (lora.h), where it has one.
// A Llama's: kLn1 and kLn2 its RMSNorms' outputs (only their rstd kept),
// kQkv its q, k and v, q and k turned in place (what attention reads),
// kFch gate and up, kFchGelu their SwiGLU.
enum ActField {
  kLn1,
  kQkv,
  kAtty,
  kRes2,
  kLn2,
  kFch,
  kFchGelu,
  kLoraU,
  kNumBig = kLoraU + kNumLoraTargets,
  kLn1Mean = kNumBig,
  kLn1Rstd,
  kLn2Mean,
  kLn2Rstd,
  kAttStats,
  kNumFields
};

struct LayerActs {
  void* f[kNumFields];
  int64_t n[kNumFields];  // each field's elements (0 for what the table does not keep)
};

inline float* fp32(const LayerActs& a, ActField f) { return static_cast<float*>(a.f[f]); }

// p advanced by n elements of `bytes` each.
inline void* at(void* p, int64_t n, int64_t bytes) { return static_cast<char*>(p) + n * bytes; }
inline const void* at(const void* p, int64_t n, int64_t bytes) { return static_cast<const char*>(p) + n * bytes; }

// A Llama's: its rotary table on the device (q and k are turned in place
// of the QKV product's output, their gradients back in place), the
// RMSNorms' eps, the MLP's width.
struct LlamaParts {
  const float* rope = nullptr;
  RopeShape shape{};
  float eps = 0;
  int F = 0;
  LoraTargetDims lora[kNumLoraTargets] = {};  // each target's place in its product
};

struct Dims {
  int B, T, C, NH;
  int64_t N;
  // A training pass's adapter dropout: p (0: none) and the pass's seed.
  float lora_p = 0;
  uint64_t lora_seed = 0;
  LlamaParts llama;  // a Llama's (its shape's T and pos the pass's); rope null for GPT-2
  // Packed sequences: each row's position in its document [N], on the
  // device (attention, rotary and learned positions); null: none.
  const int32_t* pos = nullptr;
};

// Layer l's adapter of target t: its dropout this pass.
inline LoraDropout lora_dropout(const Dims& d, int l, int t) {
  return {d.lora_p, cuda::splitmix64(d.lora_seed ^ (uint64_t(l) << 8 | uint64_t(t)))};
}

// What a block pass computes with: the table, its stream and the pass's
// sizes.
struct BlockPass {
  Kernels& k;
  Stream& s;
  const Dims& d;
};

// A forward's operand scratch: `proj` [N, C], attention's, LoRA's
// (lora_forward's t); every activation produced is rounded to `rnd_to`
// (kF32: none need it).
struct ForwardBuffers {
  void* proj;
  float* attn_scratch;
  void* lora;
  DType rnd_to;
};

// Operands, but attn_scratch.
struct BackwardBuffers {
  void *dbuf, *dqkv, *dfch;
  float* attn_scratch;
  void* lora;  // lora_backward's dt [N, lora_wide], then its du [N, r]
  int64_t lora_wide;
  int64_t op_bytes;
  DType rounding;  // Impl::rounding()
};

class Block {
 public:
  virtual ~Block() = default;
  // Layer l forward from its input x; `out` may alias x, or be null when
  // recomputing for backward (the block output is not needed then). Each
  // product with an adapter adds it before the rounding.
  virtual void forward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                       const ForwardBuffers& fb, void* out) const = 0;
  // dres holds d(block output) on entry and d(block input) on return;
  // weight gradients accumulate into g (a frozen weight's is null). An
  // adapter adds its share of its product's input gradient after the
  // frozen weight's.
  virtual void backward(const BlockPass& p, int l, const LayerWeights& w, const void* x, const LayerActs& a,
                        const LayerGrads& g, void* dres, const BackwardBuffers& bb) const = 0;
  // The final norm of the last block's output x into out, its statistics
  // (mean where the norm has one) kept; and its backward, dx += from dy.
  virtual void final_norm_forward(const BlockPass& p, const GlobalWeights& g, const void* x, void* out, float* mean,
                                  float* rstd) const = 0;
  virtual void final_norm_backward(const BlockPass& p, const GlobalWeights& g, const GlobalGrads& gg, void* dx,
                                   const void* dy, const void* x, const float* mean, const float* rstd) const = 0;
};

std::unique_ptr<Block> gpt2_block();
std::unique_ptr<Block> llama_block();
// The block of c's architecture.
inline std::unique_ptr<Block> block_for(const GptConfig& c) { return c.llama() ? llama_block() : gpt2_block(); }

}  // namespace zerod
