#include "runtime/model/gpt.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/model/block.h"
#include "runtime/model/rope.h"

namespace zerod {
namespace {

// The layer a pass asks its weights for at position i: 0 .. n-1 forward,
// then n-1 .. 0 when backward follows; -1 past the end.
int pass_layer(int i, int n, bool backward) {
  if (i < n) return i;
  return backward && i < 2 * n ? 2 * n - 1 - i : -1;
}

// Tells the source which layers come at positions i and i + 1, if any do.
absl::Status announce(WeightSource& ws, int i, int n, bool backward) {
  const int next = pass_layer(i, n, backward);
  return next < 0 ? absl::OkStatus() : ws.prefetch(next, pass_layer(i + 1, n, backward));
}

// `att_stats`: the floats the table's attention keeps a query row;
// `lora`: the adapters, if any.
void field_sizes(const GptConfig& c, int B, int T, int att_stats, const LoraConfig* lora, int64_t* size) {
  const int64_t N = int64_t(B) * T, C = c.n_embd;
  size[kLn1] = N * C;
  size[kQkv] = N * c.qkv_width();
  size[kAtty] = N * C;
  size[kRes2] = N * C;
  size[kLn2] = N * C;
  size[kFch] = N * c.mlp_in_width();
  size[kFchGelu] = N * c.mlp_width();
  for (int t = 0; t < kNumLoraTargets; ++t) size[kLoraU + t] = lora && lora->targets[t] ? N * lora->r : 0;
  for (int f = kNumBig; f < kAttStats; ++f) size[f] = N;
  if (c.llama()) size[kLn1Mean] = size[kLn2Mean] = 0;
  size[kAttStats] = int64_t(B) * c.n_head * T * att_stats;
}

// Field pointers laid out back to back from `big` (elements of
// `big_bytes`) and `small` (fp32).
LayerActs carve(const int64_t* size, void* big, int64_t big_bytes, float* small) {
  LayerActs a;
  char* next = static_cast<char*>(big);
  for (int f = 0; f < kNumFields; ++f) {
    if (f == kNumBig) next = reinterpret_cast<char*>(small);
    a.f[f] = next;
    a.n[f] = size[f];
    next += size[f] * (f < kNumBig ? big_bytes : 4);
  }
  return a;
}

// Where one block's fp32 statistics start in its scratch, after `big`
// operands of `bytes`: 4-byte aligned, whatever the 16-bit fields add to.
int64_t scratch_stats_offset(int64_t big, int64_t bytes) { return (big * bytes + 3) / 4 * 4; }

// The widest input or output of any target's product: a LoRA pass's
// scratch (lora.h's t and dt) holds a row of it (4C for GPT-2).
int lora_wide(const GptConfig& c) {
  int wide = 0;
  for (int t = 0; t < lora_targets_of(c.arch); ++t) {
    const LoraTargetDims d = lora_target_dims(c, t);
    wide = std::max({wide, d.in, d.out});
  }
  return wide;
}

// Packed sequences' positions: each sequence starting a document, each
// position 0 (a new document) or one past its predecessor's.
absl::Status check_positions(const int32_t* pos, int B, int T, bool packed) {
  if (!packed)
    return absl::InvalidArgumentError("packed sequences' positions for a model not made for packed sequences");
  for (int64_t n = 0; n < int64_t(B) * T; ++n) {
    const int32_t want = n % T == 0 ? 0 : pos[n - 1] + 1;
    if (pos[n] != 0 && pos[n] != want) {
      return absl::InvalidArgumentError(absl::StrCat("packed sequences' position ", pos[n], " at token ", n % T,
                                                     " of sequence ", n / T, ": expected 0 or ", want));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct Gpt::Impl {
  GptConfig config;
  const LoraConfig* lora = nullptr;  // the model's
  DType act_dtype;
  // The table's operand type, and whether it is act_dtype: then saved
  // activations and block inputs are operands in place (the GPU's, and an
  // fp32 job's). Else (a CPU job in 16 bits) each block computes on fp32
  // copies that round_to keeps at act_dtype's values, packed to and from
  // the 16-bit store.
  DType op;
  int64_t op_bytes;
  bool in_place;
  bool checkpointing;
  // Slots: micro-batches a step holds at once (a layer-major model's
  // passes, else 1), each with its own block inputs, residual gradient and
  // token buffers, `slot_tokens` (B * T) apart.
  int64_t slot_tokens = 0;
  Device& dev;
  Kernels& k;
  Stream& s;                 // the device's compute stream
  int64_t size[kNumFields];  // elements of each field at the maximum B, T
  int64_t big_numel = 0, small_numel = 0;
  int64_t act_bytes = 0;  // one element of the activation store

  Buffer residuals;    // n_layer + 1 block inputs/outputs, act dtype
  Buffer layer_store;  // per-layer saved activations, act dtype (no checkpointing)
  Buffer layer_stats;  // per-layer LayerNorm statistics, fp32 (no checkpointing)
  Buffer scratch;      // one block's activations as operands (checkpointing, or not in_place)
  Buffer x_fp32;       // fp32 block input (not in_place)
  Buffer lnf, lnf_mean, lnf_rstd;
  // Backward and head workspace.
  Buffer dres, dbuf, dqkv, dfch, proj, attn_scratch, logits, losses;
  Buffer rope_table;  // a Llama's (LlamaParts)
  LlamaParts llama_parts;
  std::unique_ptr<Block> block;  // the architecture's
  Buffer lora_scratch;           // a LoRA product's [N, lora_wide] (forward, backward) and [N, r] (backward)
  int64_t logits_rows = 0;
  // Token ids, their order for the embedding's backward, and the results
  // the host reads, on the device.
  Buffer inputs, targets, order, loss_sum;
  Buffer order_host, loss_host;  // host memory (pinned on a GPU), a part for each pass
  // Packed sequences' positions (a model made `packed`), and for learned
  // positions their order for embedding_backward, with its host copies.
  Buffer positions, positions_order, positions_order_host;
  std::vector<int64_t> pass_tokens;  // B * T of each pass

  Impl(Device& d, Kernels& kt) : dev(d), k(kt), s(d.compute_stream()) {}

  // Block l's input (l = 0: embedding output; l = n_layer: last block output)
  // in slot `slot`'s part of the residual store, for N tokens.
  void* residual(int l, int64_t N, int slot = 0) const {
    const int64_t first = slot * (config.n_layer + 1) * slot_tokens;
    return at(residuals.data(), (first + l * N) * config.n_embd, act_bytes);
  }
  void* dres_of(int slot) const { return at(dres.data(), slot * slot_tokens * config.n_embd, op_bytes); }
  int32_t* tokens_of(const Buffer& b, int slot) const { return b.ptr<int32_t>() + slot * slot_tokens; }
  LayerActs scratch_acts() const {
    return carve(size, scratch.data(), op_bytes,
                 static_cast<float*>(at(scratch.data(), scratch_stats_offset(big_numel, op_bytes), 1)));
  }
  // Block l's saved activations as operands: the store itself in place,
  // else the scratch copy (filled or drained by pack_acts).
  LayerActs stored_acts(int l) const {
    float* stats = layer_stats.ptr<float>() + l * small_numel;
    if (in_place) return carve(size, at(layer_store.data(), l * big_numel, act_bytes), act_bytes, stats);
    return carve(size, scratch.data(), op_bytes, stats);
  }
  // What the model rounds fp32 operands to: act_dtype's values where the
  // operands are not of that type already (kF32 rounds nothing).
  DType rounding() const { return op == DType::kF32 ? act_dtype : DType::kF32; }
  void pack_acts(int l, const LayerActs& a, int B, int T, bool to_store) const {
    int64_t n[kNumFields];
    field_sizes(config, B, T, k.attention_row_stats(), lora, n);
    char* store = static_cast<char*>(layer_store.data()) + l * big_numel * act_bytes;
    for (int f = 0; f < kNumBig; ++f) {
      if (to_store) {
        k.convert_from_f32(s, act_dtype, fp32(a, ActField(f)), store, n[f]);
      } else {
        k.convert_to_f32(s, act_dtype, store, fp32(a, ActField(f)), n[f]);
      }
      store += size[f] * act_bytes;
    }
  }
  // Host token ids to the device.
  void upload(int32_t* dst, const int32_t* tokens, int64_t n) { dev.copy(s, dst, tokens, n * 4); }
  void upload(Buffer& dst, const int32_t* tokens, int64_t n) { upload(dst.ptr<int32_t>(), tokens, n); }
  // The inputs' order for embedding_backward, from pass `pass`'s host copy.
  void upload_order(int32_t* dst, Buffer& staging, const int32_t* tokens, int64_t n, int pass) {
    // A pass's part holds the most tokens a pass takes.
    int32_t* host = staging.host<int32_t>() + pass * slot_tokens;
    token_order(tokens, n, host);
    upload(dst, host, n);
  }
  // A training pass's tokens (and positions, if packed) into `slot`'s
  // buffers, its orders through pass `pass`'s host part.
  void upload_training(const int32_t* in, const int32_t* tg, const int32_t* pos, int64_t N, int slot, int pass) {
    upload(tokens_of(inputs, slot), in, N);
    upload(tokens_of(targets, slot), tg, N);
    upload_order(tokens_of(order, slot), order_host, in, N, pass);
    if (pos) {
      upload(tokens_of(positions, slot), pos, N);
      if (!config.llama()) upload_order(tokens_of(positions_order, slot), positions_order_host, pos, N, pass);
    }
    pass_tokens[pass] = N;
  }
  ForwardBuffers forward_buffers() { return {proj.data(), attn_scratch.ptr<float>(), lora_scratch.data(), rounding()}; }
  // `backward`: the pass goes on through the layers in reverse.
  absl::StatusOr<const void*> forward_blocks(WeightSource& ws, const Dims& d, bool backward);
  // The passes' steps, on `slot`'s buffers. embed: the embeddings into
  // block 0's input, returning what block 0 computes on. forward_block:
  // block l on x, its output into block l + 1's input, returning what the
  // next block computes on (x itself, not in place). block_input: block
  // l's input as an operand (its fp32 copy, not in place).
  void* embed(const GlobalWeights& g, const Dims& d, int slot);
  void* forward_block(const BlockPass& p, int l, const LayerWeights& w, void* x, int slot);
  void* block_input(int l, int64_t N, int slot);
  // After the last block (its output xL): the final norm's output.
  void final_norm(const BlockPass& p, const GlobalWeights& g, const void* xL);
  // The head's loss (to pass `pass`'s host slot) and gradients, and from
  // them the final norm's: `slot`'s residual gradient.
  void head_backward(const BlockPass& p, const GlobalWeights& g, const GlobalGrads& gg, float grad_scale,
                     const void* xL, int slot, int pass);
  // Block l's backward from `slot`'s residual gradient, its input's into it.
  void layer_backward(const BlockPass& p, int l, const LayerWeights& w, const LayerGrads& lg, int slot);
  void embedding_backward(const GlobalGrads& gg, const Dims& d, int slot);
  // A pass over B x T tokens in `slot`; a training pass's adapters drop
  // out with this seed; `packed`: its positions are in the slot's.
  Dims dims(int B, int T, bool training, uint64_t dropout_seed, bool packed = false, int slot = 0) const {
    const float p = training && lora ? static_cast<float>(lora->dropout) : 0.0f;
    Dims d{B, T, config.n_embd, config.n_head, int64_t(B) * T, p, dropout_seed, llama_parts};
    d.llama.shape.T = T;
    if (packed) d.pos = d.llama.shape.pos = tokens_of(positions, slot);
    return d;
  }
};

Gpt::Gpt(const GptConfig& config, int B, int T, DType act_dtype, bool checkpointing, bool checkpoints_on_host,
         const LoraConfig* lora, int passes, bool packed, bool layer_major, Device& device, Kernels& kernels)
    : layout_(config),
      B_(B),
      T_(T),
      act_dtype_(act_dtype),
      checkpointing_(checkpointing),
      checkpoints_on_host_(checkpoints_on_host),
      lora_(lora ? std::optional(*lora) : std::nullopt),
      passes_(passes),
      packed_(packed),
      layer_major_(layer_major),
      device_(device),
      kernels_(kernels) {}

Gpt::~Gpt() {
  // Queued work may still use the buffers.
  if (impl_) device_.synchronize(impl_->s).IgnoreError();
}

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::create(const GptConfig& config, int B, int T, DType act_dtype,
                                                 bool checkpointing, Device& device, Kernels& kernels,
                                                 bool checkpoints_on_host, const LoraConfig* lora, int passes,
                                                 bool packed, bool layer_major) {
  ZEROD_RETURN_IF_ERROR(validate_gpt_config(config));
  if (lora) {
    ZEROD_RETURN_IF_ERROR(validate_lora_config(*lora, config.arch));
    ZEROD_RETURN_IF_ERROR(validate_lora_rank(*lora, config));
  }
  if (B < 1 || T < 1 || T > config.block_size) {
    return absl::InvalidArgumentError("micro-batch must be at least 1 and sequence length within block_size");
  }
  if (passes < 1) return absl::InvalidArgumentError(absl::StrCat("a model for ", passes, " passes"));
  if (layer_major && !checkpointing) {
    return absl::InvalidArgumentError(
        "a layer-major model keeps each micro-batch's block inputs: it needs checkpointing");
  }
  if (kernels.operand_type() != DType::kF32 && kernels.operand_type() != act_dtype) {
    return absl::InvalidArgumentError(absl::StrCat("a model computing in ", dtype_name(act_dtype),
                                                   " cannot run on a kernel table of ",
                                                   dtype_name(kernels.operand_type()), " operands"));
  }
  std::unique_ptr<Gpt> g(new Gpt(config, B, T, act_dtype, checkpointing, checkpoints_on_host, lora, passes, packed,
                                 layer_major, device, kernels));
  ZEROD_RETURN_IF_ERROR(g->allocate());
  return g;
}

// One of the model's buffers: where Impl keeps it, and its description.
struct Gpt::ModelBuffer {
  Buffer Impl::*member;
  BufferSpec spec;
};

std::vector<Gpt::ModelBuffer> Gpt::buffer_specs(const GptConfig& c, int B, int T, DType act_dtype, bool checkpointing,
                                                bool checkpoints_on_host, const LoraConfig* lora, int passes,
                                                bool packed, bool layer_major, const PlanDevice& device,
                                                const KernelMemory& k, DType op_type) {
  const int64_t N = int64_t(B) * T, C = c.n_embd, L = c.n_layer, V = c.vocab_size;
  const bool llama = c.llama();
  int64_t size[kNumFields];
  field_sizes(c, B, T, k.attention_row_stats(), lora, size);
  int64_t big = 0, small = 0;
  for (int f = 0; f < kNumBig; ++f) big += size[f];
  for (int f = kNumBig; f < kNumFields; ++f) small += size[f];
  const int64_t act = dtype_size(act_dtype);
  const int64_t op = dtype_size(op_type);
  const bool in_place = op_type == act_dtype;
  const Category A = Category::kActivations, W = Category::kWorkspace;
  const int64_t slots = layer_major ? passes : 1;  // Impl's
  std::vector<ModelBuffer> specs;
  auto add = [&](Buffer Impl::*member, const char* what, int64_t bytes, Category cat,
                 std::optional<Tier> tier = std::nullopt) {
    specs.push_back({member, {absl::StrCat("model: ", what), cat, static_cast<uint64_t>(bytes), 1, tier}});
  };
  // The block inputs: with checkpointing all that forward keeps for
  // backward; on a GPU, in host memory (pinned) when asked.
  const bool on_host = checkpointing && checkpoints_on_host && !device.host_visible();
  add(&Impl::residuals, "block inputs", slots * (L + 1) * N * C * act, A,
      on_host ? std::optional(device.staging_tier()) : std::nullopt);
  if (!checkpointing) {
    add(&Impl::layer_store, "saved layer activations", L * big * act, A);
    add(&Impl::layer_stats, "saved layer statistics", L * small * 4, A);
  }
  if (checkpointing || !in_place) {
    add(&Impl::scratch, "one block's activations", scratch_stats_offset(big, op) + small * 4, A);
  }
  if (!in_place) add(&Impl::x_fp32, "fp32 block input", N * C * 4, A);
  add(&Impl::lnf, "final LayerNorm output", N * C * op, A);
  if (!llama) add(&Impl::lnf_mean, "final LayerNorm mean", N * 4, A);
  add(&Impl::lnf_rstd, "final LayerNorm rstd", N * 4, A);
  add(&Impl::dres, "residual gradient", slots * N * C * op, W);
  add(&Impl::dbuf, "block gradient", N * C * op, W);
  add(&Impl::dqkv, "qkv gradient", N * c.qkv_width() * op, W);
  // A Llama's SwiGLU output gradient comes after its input's.
  add(&Impl::dfch, "MLP gradient", N * (c.mlp_in_width() + (llama ? c.mlp_width() : 0)) * op, W);
  if (llama) add(&Impl::rope_table, "rotary table", int64_t(T) * c.head_dim() * 4, W);
  add(&Impl::proj, "projection scratch", N * C * op, W);
  add(&Impl::attn_scratch, "attention scratch", k.attention_scratch_floats(B, T, C, c.n_head, op_type) * 4, W);
  // A chunk of the head's rows, as operands; or as many fp32 rows as fit,
  // at least one, for forward_logits.
  add(&Impl::logits, "logits, a chunk of rows", std::max(k.logits_rows(V, N) * k.logits_stride(V) * op, V * 4), W);
  add(&Impl::losses, "token losses", N * 8, W);
  if (lora) add(&Impl::lora_scratch, "LoRA products", N * (lora_wide(c) + lora->r) * op, W);
  add(&Impl::inputs, "input tokens", slots * N * 4, W);
  add(&Impl::targets, "target tokens", slots * N * 4, W);
  add(&Impl::order, "input tokens' order", slots * N * 4, W);
  add(&Impl::loss_sum, "loss sum", 8, W);
  // Pinned on a GPU: a copy to pageable memory would wait for the stream.
  add(&Impl::order_host, "input tokens' order, from the host", passes * N * 4, W, device.staging_tier());
  add(&Impl::loss_host, "loss, for the host", passes * 8, W, device.staging_tier());
  if (packed) {
    add(&Impl::positions, "token positions", slots * N * 4, W);
    if (!llama) {
      add(&Impl::positions_order, "token positions' order", slots * N * 4, W);
      add(&Impl::positions_order_host, "token positions' order, from the host", passes * N * 4, W,
          device.staging_tier());
    }
  }
  return specs;
}

void Gpt::plan(const GptConfig& config, int B, int T, DType act_dtype, bool checkpointing, bool checkpoints_on_host,
               const KernelMemory& kernels, MemoryPlan& plan, const LoraConfig* lora, int passes, bool packed,
               bool layer_major) {
  for (const ModelBuffer& b :
       buffer_specs(config, B, T, act_dtype, checkpointing, checkpoints_on_host, lora, passes, packed, layer_major,
                    plan.device(), kernels, kernels.operand_type(act_dtype))) {
    plan.add(b.spec);
  }
}

absl::Status Gpt::allocate() {
  impl_ = std::make_unique<Impl>(device_, kernels_);
  Impl& m = *impl_;
  m.config = layout_.config();
  m.lora = lora_ ? &*lora_ : nullptr;
  m.act_dtype = act_dtype_;
  m.op = kernels_.operand_type();
  m.op_bytes = dtype_size(m.op);
  m.in_place = m.op == act_dtype_;
  m.checkpointing = checkpointing_;
  m.block = block_for(layout_.config());
  m.pass_tokens.assign(passes_, 0);
  m.slot_tokens = int64_t(B_) * T_;
  const GptConfig& c = layout_.config();
  field_sizes(c, B_, T_, kernels_.attention_row_stats(), m.lora, m.size);
  for (int f = 0; f < kNumBig; ++f) m.big_numel += m.size[f];
  for (int f = kNumBig; f < kNumFields; ++f) m.small_numel += m.size[f];
  m.act_bytes = dtype_size(act_dtype_);
  m.logits_rows = kernels_.memory().logits_rows(c.vocab_size, int64_t(B_) * T_);
  for (const ModelBuffer& b : buffer_specs(c, B_, T_, act_dtype_, checkpointing_, checkpoints_on_host_, m.lora, passes_,
                                           packed_, layer_major_, plan_device(device_), kernels_.memory(), m.op)) {
    ZEROD_ASSIGN_OR_RETURN(m.*b.member, allocate_spec(device_, b.spec));
  }
  if (!c.llama()) return absl::OkStatus();
  const std::vector<float> table = rope_table(c, T_);
  device_.copy(m.s, m.rope_table.data(), table.data(), table.size() * 4);
  m.llama_parts = {m.rope_table.ptr<float>(), RopeShape{T_, c.n_head, c.kv_heads(), c.head_dim()},
                   static_cast<float>(c.norm_eps), c.ffn_hidden};
  for (int t = 0; t < lora_targets_of(c.arch); ++t) m.llama_parts.lora[t] = lora_target_dims(c, t);
  return device_.synchronize(m.s);  // before `table` goes
}

void* Gpt::Impl::embed(const GlobalWeights& g, const Dims& d, int slot) {
  const int64_t NC = d.N * d.C;
  // Not in place, each block runs on the fp32 copy of its input, in place.
  void* x = in_place ? residual(0, d.N, slot) : x_fp32.data();
  k.embedding_forward(s, x, tokens_of(inputs, slot), g.wte, g.wpe, d.B, d.T, d.C, d.pos);
  round_operands(k, s, rounding(), x, NC);
  if (!in_place) k.convert_from_f32(s, act_dtype, static_cast<float*>(x), residual(0, d.N, slot), NC);
  return x;
}

void* Gpt::Impl::forward_block(const BlockPass& p, int l, const LayerWeights& w, void* x, int slot) {
  const Dims& d = p.d;
  const LayerActs a = checkpointing ? scratch_acts() : stored_acts(l);
  void* out = in_place ? residual(l + 1, d.N, slot) : x;
  block->forward(p, l, w, x, a, forward_buffers(), out);
  if (!in_place) {
    k.convert_from_f32(s, act_dtype, static_cast<float*>(out), residual(l + 1, d.N, slot), d.N * d.C);
    if (!checkpointing) pack_acts(l, a, d.B, d.T, /*to_store=*/true);
  }
  return out;
}

void* Gpt::Impl::block_input(int l, int64_t N, int slot) {
  if (in_place) return residual(l, N, slot);
  k.convert_to_f32(s, act_dtype, residual(l, N, slot), x_fp32.ptr<float>(), N * config.n_embd);
  return x_fp32.data();
}

void Gpt::Impl::final_norm(const BlockPass& p, const GlobalWeights& g, const void* xL) {
  block->final_norm_forward(p, g, xL, lnf.data(), lnf_mean.ptr<float>(), lnf_rstd.ptr<float>());
  round_operands(k, s, rounding(), lnf.data(), p.d.N * p.d.C);
}

void Gpt::Impl::head_backward(const BlockPass& p, const GlobalWeights& g, const GlobalGrads& gg, float grad_scale,
                              const void* xL, int slot, int pass) {
  const Dims& d = p.d;
  const int64_t NC = d.N * d.C;
  ClassifierArgs head{lnf.data(),
                      g.head(),
                      tokens_of(targets, slot),
                      d.N,
                      d.C,
                      config.vocab_size,
                      grad_scale / static_cast<float>(d.N),
                      act_dtype,
                      logits.data(),
                      logits_rows,
                      losses.ptr<double>(),
                      dbuf.data(),
                      gg.head()};
  k.classifier_forward_backward(s, head);
  k.sum(s, losses.ptr<double>(), d.N, loss_sum.ptr<double>());
  dev.copy(s, loss_host.ptr<double>() + pass, loss_sum.data(), sizeof(double));
  void* dx = dres_of(slot);
  dev.memset(s, dx, 0, NC * op_bytes);
  block->final_norm_backward(p, g, gg, dx, dbuf.data(), xL, lnf_mean.ptr<float>(), lnf_rstd.ptr<float>());
  round_operands(k, s, rounding(), dx, NC);
}

void Gpt::Impl::layer_backward(const BlockPass& p, int l, const LayerWeights& w, const LayerGrads& lg, int slot) {
  const Dims& d = p.d;
  const BackwardBuffers bb{dbuf.data(),         dqkv.data(),       dfch.data(), attn_scratch.ptr<float>(),
                           lora_scratch.data(), lora_wide(config), op_bytes,    rounding()};
  const void* x = block_input(l, d.N, slot);
  LayerActs a;
  if (checkpointing) {
    a = scratch_acts();
    block->forward(p, l, w, x, a, forward_buffers(), nullptr);
  } else {
    a = stored_acts(l);
    if (!in_place) pack_acts(l, a, d.B, d.T, /*to_store=*/false);
  }
  void* dx = dres_of(slot);
  block->backward(p, l, w, x, a, lg, dx, bb);
  round_operands(k, s, rounding(), dx, d.N * d.C);
}

void Gpt::Impl::embedding_backward(const GlobalGrads& gg, const Dims& d, int slot) {
  if (!gg.wte) return;
  k.embedding_backward(s, gg.wte, gg.wpe, dres_of(slot), tokens_of(inputs, slot), tokens_of(order, slot), d.B, d.T, d.C,
                       d.pos, d.pos && gg.wpe ? tokens_of(positions_order, slot) : nullptr);
}

// The blocks and the final norm over the tokens in `inputs`; returns
// the last block's output.
absl::StatusOr<const void*> Gpt::Impl::forward_blocks(WeightSource& ws, const Dims& d, bool backward) {
  ZEROD_ASSIGN_OR_RETURN(const GlobalWeights g, ws.globals());
  const BlockPass p{k, s, d};
  void* x = embed(g, d, 0);
  for (int l = 0; l < config.n_layer; ++l) {
    ZEROD_ASSIGN_OR_RETURN(const LayerWeights w, ws.layer(l));
    ZEROD_RETURN_IF_ERROR(announce(ws, l + 1, config.n_layer, backward));
    x = forward_block(p, l, w, x, 0);
  }
  final_norm(p, g, x);
  return x;
}

absl::StatusOr<double> Gpt::forward_backward(WeightSource& ws, GradSink& sink, const int32_t* inputs,
                                             const int32_t* targets, int B, int T, float grad_scale,
                                             uint64_t dropout_seed, const int32_t* positions) {
  ZEROD_RETURN_IF_ERROR(
      enqueue_forward_backward(ws, sink, inputs, targets, B, T, grad_scale, dropout_seed, 0, positions));
  ZEROD_RETURN_IF_ERROR(device_.synchronize(impl_->s));
  return pass_loss(0);
}

absl::Status Gpt::enqueue_forward_backward(WeightSource& ws, GradSink& sink, const int32_t* inputs,
                                           const int32_t* targets, int B, int T, float grad_scale,
                                           uint64_t dropout_seed, int pass, const int32_t* positions) {
  if (pass < 0 || pass >= passes_) {
    return absl::InvalidArgumentError(absl::StrCat("pass ", pass, " of a model made for ", passes_));
  }
  if (positions) ZEROD_RETURN_IF_ERROR(check_positions(positions, B, T, packed_));
  ZEROD_RETURN_IF_ERROR(check_pass("a training pass", B, T));
  absl::Status s = enqueue_pass(ws, sink, inputs, targets, B, T, grad_scale, dropout_seed, pass, positions);
  // After a failure nothing this call enqueued may still run once it
  // returns: the caller's weights, gradients and tokens may go.
  if (!s.ok()) device_.synchronize(impl_->s).IgnoreError();
  return s;
}

double Gpt::pass_loss(int pass) const {
  return impl_->loss_host.host<double>()[pass] / static_cast<double>(impl_->pass_tokens[pass]);
}

absl::Status Gpt::enqueue_pass(WeightSource& ws, GradSink& sink, const int32_t* inputs, const int32_t* targets, int B,
                               int T, float grad_scale, uint64_t dropout_seed, int pass, const int32_t* positions) {
  Impl& m = *impl_;
  const int L = layout_.config().n_layer;
  const Dims d = m.dims(B, T, /*training=*/true, dropout_seed, positions != nullptr);
  m.upload_training(inputs, targets, positions, d.N, /*slot=*/0, pass);
  ZEROD_ASSIGN_OR_RETURN(const void* xL, m.forward_blocks(ws, d, /*backward=*/true));
  ZEROD_ASSIGN_OR_RETURN(const GlobalWeights g, ws.globals());
  ZEROD_ASSIGN_OR_RETURN(const GlobalGrads gg, sink.globals());
  const BlockPass p{kernels_, m.s, d};
  m.head_backward(p, g, gg, grad_scale, xL, /*slot=*/0, pass);
  for (int l = L - 1; l >= 0; --l) {
    ZEROD_ASSIGN_OR_RETURN(const LayerWeights w, ws.layer(l));
    ZEROD_RETURN_IF_ERROR(announce(ws, 2 * L - l, L, /*backward=*/true));
    ZEROD_ASSIGN_OR_RETURN(const LayerGrads lg, sink.layer(l));
    m.layer_backward(p, l, w, lg, /*slot=*/0);
    ZEROD_RETURN_IF_ERROR(sink.layer_done(l));
  }
  m.embedding_backward(gg, d, /*slot=*/0);
  ZEROD_RETURN_IF_ERROR(sink.end_backward());
  return ws.end_pass();
}

absl::Status Gpt::enqueue_layer_major(WeightSource& ws, GradSink& sink, const std::vector<MicroBatch>& batches, int B,
                                      int T, float grad_scale) {
  if (!layer_major_) return absl::FailedPreconditionError("a layer-major step on a model not made layer-major");
  const int count = static_cast<int>(batches.size());
  if (count < 1 || count > passes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a layer-major step of ", count, " micro-batches on a model made for ", passes_));
  }
  for (const MicroBatch& b : batches) {
    if (b.positions) ZEROD_RETURN_IF_ERROR(check_positions(b.positions, B, T, packed_));
  }
  ZEROD_RETURN_IF_ERROR(check_pass("a training pass", B, T));
  absl::Status s = enqueue_layers(ws, sink, batches, B, T, grad_scale);
  if (!s.ok()) device_.synchronize(impl_->s).IgnoreError();  // as in enqueue_forward_backward
  return s;
}

// Micro-batch j in slot j and pass j: each layer's weights asked for once
// going up and once coming down, every micro-batch's block run on them in
// turn; the head between, each micro-batch's in turn.
absl::Status Gpt::enqueue_layers(WeightSource& ws, GradSink& sink, const std::vector<MicroBatch>& batches, int B, int T,
                                 float grad_scale) {
  Impl& m = *impl_;
  const int L = layout_.config().n_layer, count = static_cast<int>(batches.size());
  std::vector<Dims> dims;
  for (int j = 0; j < count; ++j) {
    const MicroBatch& b = batches[j];
    dims.push_back(m.dims(B, T, /*training=*/true, b.dropout_seed, b.positions != nullptr, j));
    m.upload_training(b.inputs, b.targets, b.positions, dims[j].N, j, j);
  }
  const auto pass = [&](int j) { return BlockPass{kernels_, m.s, dims[j]}; };
  ZEROD_ASSIGN_OR_RETURN(const GlobalWeights g, ws.globals());
  for (int j = 0; j < count; ++j) m.embed(g, dims[j], j);
  for (int l = 0; l < L; ++l) {
    ZEROD_ASSIGN_OR_RETURN(const LayerWeights w, ws.layer(l));
    ZEROD_RETURN_IF_ERROR(announce(ws, l + 1, L, /*backward=*/true));
    for (int j = 0; j < count; ++j) {
      m.forward_block(pass(j), l, w, m.block_input(l, dims[j].N, j), j);
    }
  }
  ZEROD_ASSIGN_OR_RETURN(const GlobalGrads gg, sink.globals());
  for (int j = 0; j < count; ++j) {
    const void* xL = m.block_input(L, dims[j].N, j);
    m.final_norm(pass(j), g, xL);
    m.head_backward(pass(j), g, gg, grad_scale, xL, j, j);
  }
  for (int l = L - 1; l >= 0; --l) {
    ZEROD_ASSIGN_OR_RETURN(const LayerWeights w, ws.layer(l));
    ZEROD_RETURN_IF_ERROR(announce(ws, 2 * L - l, L, /*backward=*/true));
    ZEROD_ASSIGN_OR_RETURN(const LayerGrads lg, sink.layer(l));
    for (int j = 0; j < count; ++j) m.layer_backward(pass(j), l, w, lg, j);
    ZEROD_RETURN_IF_ERROR(sink.layer_done(l));
  }
  for (int j = 0; j < count; ++j) m.embedding_backward(gg, dims[j], j);
  ZEROD_RETURN_IF_ERROR(sink.end_backward());
  return ws.end_pass();
}

absl::Status Gpt::check_pass(const char* what, int B, int T) const {
  if (B >= 1 && T >= 1 && T <= T_ && int64_t(B) * T <= max_tokens()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " of ", B, " x ", T, " tokens: the model holds ", max_tokens(),
                                                 " tokens a pass, ", T_, " a row"));
}

absl::StatusOr<double> Gpt::loss_sum(WeightSource& ws, const int32_t* inputs, const int32_t* targets, int B, int T,
                                     const int32_t* positions) {
  if (positions) ZEROD_RETURN_IF_ERROR(check_positions(positions, B, T, packed_));
  ZEROD_RETURN_IF_ERROR(check_pass("an evaluation pass", B, T));
  absl::Status pass = enqueue_loss(ws, inputs, targets, B, T, positions);
  pass.Update(device_.synchronize(impl_->s));  // as in forward_backward
  ZEROD_RETURN_IF_ERROR(pass);
  return impl_->loss_host.host<double>()[0];
}

// The training pass's forward and loss (enqueue_pass), without dropout or
// anything backward: the head's losses alone, summed into pass 0's slot
// for the host (read before any training pass reuses it).
absl::Status Gpt::enqueue_loss(WeightSource& ws, const int32_t* inputs, const int32_t* targets, int B, int T,
                               const int32_t* positions) {
  Impl& m = *impl_;
  Kernels& k = kernels_;
  const GptConfig& c = layout_.config();
  const Dims d = m.dims(B, T, /*training=*/false, 0, positions != nullptr);
  m.upload(m.inputs, inputs, d.N);
  m.upload(m.targets, targets, d.N);
  if (positions) m.upload(m.positions, positions, d.N);
  ZEROD_RETURN_IF_ERROR(m.forward_blocks(ws, d, /*backward=*/false).status());
  ZEROD_ASSIGN_OR_RETURN(const GlobalWeights g, ws.globals());
  const ClassifierArgs head{
      m.lnf.data(),    g.head(),      m.targets.ptr<int32_t>(), d.N,     d.C,    c.vocab_size, 0.0f, act_dtype_,
      m.logits.data(), m.logits_rows, m.losses.ptr<double>(),   nullptr, nullptr};
  k.classifier_forward_backward(m.s, head);
  k.sum(m.s, m.losses.ptr<double>(), d.N, m.loss_sum.ptr<double>());
  device_.copy(m.s, m.loss_host.ptr<double>(), m.loss_sum.data(), sizeof(double));
  return ws.end_pass();
}

absl::Status Gpt::forward_logits(WeightSource& ws, const int32_t* tokens, int B, int T, float* logits, bool last_only) {
  absl::Status pass = enqueue_logits(ws, tokens, B, T, logits, last_only);
  pass.Update(device_.synchronize(impl_->s));  // as in forward_backward
  return pass;
}

absl::Status Gpt::enqueue_logits(WeightSource& ws, const int32_t* tokens, int B, int T, float* logits, bool last_only) {
  Impl& m = *impl_;
  const int C = layout_.config().n_embd, V = layout_.config().vocab_size;
  ZEROD_RETURN_IF_ERROR(check_pass("forward_logits", B, T));
  const int64_t rows = last_only ? B : int64_t(B) * T;
  m.upload(m.inputs, tokens, int64_t(B) * T);
  ZEROD_RETURN_IF_ERROR(m.forward_blocks(ws, m.dims(B, T, /*training=*/false, 0), /*backward=*/false).status());
  ZEROD_ASSIGN_OR_RETURN(const GlobalWeights g, ws.globals());
  // The last position: row T-1 of each sequence, T*C operands apart. The
  // logits go out through the head's chunk buffer, so that a pass needs no
  // memory training does not.
  const int64_t stride = last_only ? int64_t(T) * C : C;
  const void* lnf = at(m.lnf.data(), last_only ? int64_t(T - 1) * C : 0, m.op_bytes);
  const int64_t chunk = std::max<int64_t>(1, m.logits.bytes() / (int64_t(V) * 4));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    kernels_.classifier_logits(m.s, m.logits.ptr<float>(), at(lnf, r * stride, m.op_bytes), stride, g.head(), n, C, V);
    device_.copy(m.s, logits + r * V, m.logits.data(), n * V * 4);
  }
  return ws.end_pass();
}

}  // namespace zerod
