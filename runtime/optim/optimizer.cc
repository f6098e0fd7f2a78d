#include "runtime/optim/optimizer.h"

#include <cstring>
#include <vector>

namespace zerod {

std::unique_ptr<Optimizer> Optimizer::create_unbound(const OptimizerConfig& cfg, std::vector<ParamPiece> pieces,
                                                     DType param16_type) {
  std::unique_ptr<Optimizer> o(new Optimizer());
  o->hyper_ =
      AdamHyper{static_cast<float>(cfg.beta1),        static_cast<float>(cfg.beta2),    static_cast<float>(cfg.eps),
                static_cast<float>(cfg.weight_decay), cfg.type != OptimizerType::kAdam, cfg.bias_correction};
  o->param16_type_ = param16_type;
  const bool eight_bit = cfg.type == OptimizerType::kAdamW8bit;
  for (const ParamPiece& p : pieces) {
    const bool quantized = eight_bit && p.tensor_numel >= kMin8bitNumel;
    if (quantized) {
      o->pieces_.push_back({p, true, o->quantized_numel_, o->blocks_});
      o->quantized_numel_ += p.numel;
      o->blocks_ += quant_blocks(p.numel);
    } else {
      o->pieces_.push_back({p, false, o->fp32_numel_, 0});
      o->fp32_numel_ += p.numel;
    }
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& cfg,
                                                             std::vector<ParamPiece> pieces, DType param16_type,
                                                             Device& d) {
  std::unique_ptr<Optimizer> o = create_unbound(cfg, std::move(pieces), param16_type);
  ZEROD_ASSIGN_OR_RETURN(o->own_, d.allocate(o->state_bytes(), Category::kOptimizer));
  o->bind(o->own_.data());
  o->zero_states(d, d.compute_stream());
  return o;
}

uint64_t Optimizer::state_bytes() const {
  return (fp32_numel_ + blocks_) * 2 * sizeof(float) + quantized_numel_ * 2;
}

void Optimizer::bind(void* storage) {
  states_ = static_cast<float*>(storage);
  absmax_ = states_ + 2 * fp32_numel_;
  codes_ = reinterpret_cast<uint8_t*>(absmax_ + 2 * blocks_);
}

void Optimizer::zero_states(Device& d, Stream& s) {
  d.memset(s, states_, 0, (fp32_numel_ + blocks_) * 2 * sizeof(float));  // m, v and the absmax values
  d.memset(s, codes_, signed_dynamic_map().zero, quantized_numel_);
  d.memset(s, codes_ + quantized_numel_, unsigned_dynamic_map().zero, quantized_numel_);
}

Adam8bitTensor Optimizer::quantized_view(const Piece& pc) const {
  Adam8bitTensor t;
  t.param = pc.p.master;
  t.m = codes_ + pc.state;
  t.v = codes_ + quantized_numel_ + pc.state;
  t.m_absmax = absmax_ + pc.block;
  t.v_absmax = absmax_ + blocks_ + pc.block;
  t.grad = pc.p.grad;
  t.param16 = pc.p.param16;
  t.param16_type = param16_type_;
  t.n = pc.p.numel;
  return t;
}

AdamTensor Optimizer::fp32_view(const Piece& pc) const {
  AdamTensor t;
  t.param = pc.p.master;
  t.m = states_ + pc.state;
  t.v = states_ + fp32_numel_ + pc.state;
  t.grad = pc.p.grad;
  t.param16 = pc.p.param16;
  t.param16_type = param16_type_;
  t.n = pc.p.numel;
  return t;
}

std::vector<StateArray> Optimizer::state_arrays() {
  const int64_t f = fp32_numel_, q = quantized_numel_, b = blocks_;
  auto at = [](auto* base, int64_t offset) -> void* { return base ? base + offset : nullptr; };
  std::vector<StateArray> all = {
      {"m", DType::kF32, at(states_, 0), f},        {"v", DType::kF32, at(states_, f), f},
      {"m_codes", DType::kU8, at(codes_, 0), q},    {"v_codes", DType::kU8, at(codes_, q), q},
      {"m_absmax", DType::kF32, at(absmax_, 0), b}, {"v_absmax", DType::kF32, at(absmax_, b), b}};
  std::erase_if(all, [](const StateArray& a) { return a.numel == 0; });
  return all;
}

Optimizer::PieceStates Optimizer::piece_states(int k) const {
  const Piece& pc = pieces_[k];
  return {pc.quantized, pc.state, pc.block};
}

std::vector<Optimizer::ByteRange> Optimizer::piece_state_ranges(int k) const {
  const Piece& pc = pieces_[k];
  const auto base = reinterpret_cast<const char*>(states_);
  auto range = [&](const void* p, uint64_t bytes) {
    return ByteRange{static_cast<uint64_t>(static_cast<const char*>(p) - base), bytes};
  };
  const int64_t n = pc.p.numel;
  if (!pc.quantized) {
    const AdamTensor t = fp32_view(pc);
    return {range(t.m, n * sizeof(float)), range(t.v, n * sizeof(float))};
  }
  const Adam8bitTensor t = quantized_view(pc);
  const uint64_t absmax_bytes = quant_blocks(n) * sizeof(float);
  return {range(t.m, n), range(t.v, n), range(t.m_absmax, absmax_bytes), range(t.v_absmax, absmax_bytes)};
}

void Optimizer::set_piece_states(int k, const float* m, const float* v) {
  const Piece& pc = pieces_[k];
  if (pc.quantized) {
    const Adam8bitTensor t = quantized_view(pc);
    quantize_blockwise(signed_dynamic_map(), m, t.n, t.m, t.m_absmax);
    quantize_blockwise(unsigned_dynamic_map(), v, t.n, t.v, t.v_absmax);
  } else {
    const AdamTensor t = fp32_view(pc);
    std::memcpy(t.m, m, t.n * sizeof(float));
    std::memcpy(t.v, v, t.n * sizeof(float));
  }
}

std::vector<Optimizer::Span> Optimizer::part_arrays(int k, int64_t start, int64_t n) const {
  const Piece& pc = pieces_[k];
  std::vector<Span> arrays = {{pc.p.master + start, n * sizeof(float)}};
  if (!pc.quantized) {
    const AdamTensor t = fp32_view(pc);
    arrays.push_back({t.m + start, n * sizeof(float)});
    arrays.push_back({t.v + start, n * sizeof(float)});
    return arrays;
  }
  const Adam8bitTensor t = quantized_view(pc);
  const int64_t block = start / kQuantBlock;
  const uint64_t absmax_bytes = quant_blocks(n) * sizeof(float);
  arrays.push_back({t.m_absmax + block, absmax_bytes});
  arrays.push_back({t.v_absmax + block, absmax_bytes});
  arrays.push_back({t.m + start, static_cast<uint64_t>(n)});
  arrays.push_back({t.v + start, static_cast<uint64_t>(n)});
  return arrays;
}

void Optimizer::step_part(Kernels& kern, Stream& s, int k, int64_t n, const std::vector<void*>& at,
                          const float* grad, void* param16, float lr, int64_t step, float grad_scale) const {
  const Piece& pc = pieces_[k];
  const AdamStep st = make_adam_step(hyper_, lr, step, grad_scale, pc.p.decay);
  auto f32 = [&](int i) { return static_cast<float*>(at[i]); };
  if (!pc.quantized) {
    kern.adam(s, AdamTensor{f32(0), f32(1), f32(2), grad, DType::kF32, param16, param16_type_, n}, st);
    return;
  }
  kern.adam8bit(s,
                Adam8bitTensor{f32(0), static_cast<uint8_t*>(at[3]), static_cast<uint8_t*>(at[4]), f32(1), f32(2),
                               grad, DType::kF32, param16, param16_type_, n},
                st);
}

void Optimizer::step(Kernels& k, Stream& s, float lr, int64_t step, float grad_scale, int first, int last,
                     const float* grad_scale_at) {
  AdamStep with_decay = make_adam_step(hyper_, lr, step, grad_scale, true);
  AdamStep without_decay = make_adam_step(hyper_, lr, step, grad_scale, false);
  with_decay.grad_scale_at = without_decay.grad_scale_at = grad_scale_at;
  if (last < 0) last = static_cast<int>(pieces_.size());
  // The pieces as two lists, so that a table may take many in a launch.
  std::vector<AdamTensor> fp32;
  std::vector<Adam8bitTensor> quantized;
  std::vector<AdamStep> fp32_steps, quantized_steps;
  for (int i = first; i < last; ++i) {
    const Piece& pc = pieces_[i];
    const AdamStep& st = pc.p.decay ? with_decay : without_decay;
    if (pc.quantized) {
      quantized.push_back(quantized_view(pc));
      quantized_steps.push_back(st);
    } else {
      fp32.push_back(fp32_view(pc));
      fp32_steps.push_back(st);
    }
  }
  if (!fp32.empty()) k.adam_tensors(s, fp32, fp32_steps);
  if (!quantized.empty()) k.adam8bit_tensors(s, quantized, quantized_steps);
}

}  // namespace zerod
