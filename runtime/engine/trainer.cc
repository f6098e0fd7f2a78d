#include "runtime/engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/cpu_kernels.h"
#include "runtime/optim/lr_schedule.h"

namespace zerod {

Trainer::Trainer(const JobConfig& cfg) : cfg_(cfg), scaler_(cfg.fp16), sample_rng_state_(cfg.run.seed) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const JobConfig& cfg) {
  std::unique_ptr<Trainer> t(new Trainer(cfg));
  ZEROD_RETURN_IF_ERROR(t->build());
  return t;
}

absl::Status Trainer::build() {
  ZEROD_ASSIGN_OR_RETURN(data_, load_dataset(cfg_.data, cfg_.model.vocab_size));
  loader_ = std::make_unique<DataLoader>(&data_.tokens, cfg_.data.seq_len, cfg_.data.seed);
  ZEROD_ASSIGN_OR_RETURN(model_, Gpt::create(cfg_.model, cfg_.micro_batch, cfg_.data.seq_len, cfg_.precision,
                                             cfg_.activation_checkpointing));
  const int64_t n = model_->layout().num_params();
  const bool mixed = cfg_.precision != DType::kF32;
  ZEROD_ASSIGN_OR_RETURN(params_, Buffer::allocate(n * dtype_size(cfg_.precision), Category::kParams));
  ZEROD_ASSIGN_OR_RETURN(grads_, Buffer::allocate(n * 4, Category::kGrads));
  ZEROD_ASSIGN_OR_RETURN(adam_m_, Buffer::allocate(n * 4, Category::kOptimizer));
  ZEROD_ASSIGN_OR_RETURN(adam_v_, Buffer::allocate(n * 4, Category::kOptimizer));
  if (mixed) {
    ZEROD_ASSIGN_OR_RETURN(master_, Buffer::allocate(n * 4, Category::kOptimizer));
  }
  const int64_t tokens = int64_t(cfg_.micro_batch) * cfg_.data.seq_len;
  ZEROD_ASSIGN_OR_RETURN(inputs_, Buffer::allocate(tokens * 4, Category::kWorkspace));
  ZEROD_ASSIGN_OR_RETURN(targets_, Buffer::allocate(tokens * 4, Category::kWorkspace));

  float* master = this->master();
  init_gpt_params(model_->layout(), cfg_.run.seed, master);
  if (mixed) convert_from_f32(cfg_.precision, master, params_.data(), n);
  std::memset(adam_m_.data(), 0, n * 4);
  std::memset(adam_v_.data(), 0, n * 4);
  ZEROD_ASSIGN_OR_RETURN(FlatWeights w, FlatWeights::create(&model_->layout(), cfg_.precision, params_.data()));
  weights_ = std::make_unique<FlatWeights>(std::move(w));

  const OptimizerConfig& o = cfg_.optimizer;
  adam_ = AdamHyper{static_cast<float>(o.beta1), static_cast<float>(o.beta2), static_cast<float>(o.eps),
                    static_cast<float>(o.weight_decay), o.type != OptimizerType::kAdam};
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::step() {
  const GptLayout& layout = model_->layout();
  const int64_t n = layout.num_params();
  const int B = cfg_.micro_batch, T = cfg_.data.seq_len, accum = cfg_.grad_accum;
  const bool fp16 = cfg_.precision == DType::kF16;
  const double scale = fp16 ? scaler_.scale() : 1.0;
  float* grads = grads_.as<float>();
  std::memset(grads, 0, n * 4);

  StepResult r;
  r.step = ++steps_;
  r.loss_scale = scale;
  double loss_sum = 0.0;
  for (int micro = 0; micro < accum; ++micro) {
    loader_->next_batch(B, inputs_.as<int32_t>(), targets_.as<int32_t>());
    loss_sum += model_->forward_backward(*weights_, inputs_.as<int32_t>(), targets_.as<int32_t>(), B, T, grads,
                                         static_cast<float>(scale / accum));
  }
  r.loss = loss_sum / accum;

  const double sumsq = cpu::sum_squares(grads, n);
  if (!std::isfinite(sumsq)) {
    if (!fp16) {
      return absl::InternalError(absl::StrCat("gradients are not finite at step ", r.step, " (loss ", r.loss, ")"));
    }
    ZEROD_RETURN_IF_ERROR(scaler_.update(/*overflow=*/true));
    r.skipped = true;
    r.grad_norm = INFINITY;
    r.lr = last_lr_;
    return r;
  }
  r.grad_norm = std::sqrt(sumsq) / scale;
  // One factor unscales and clips (DeepSpeed: coefficient clip / (norm + 1e-6) when below 1).
  double factor = 1.0 / scale;
  if (cfg_.gradient_clipping > 0) {
    const double coef = cfg_.gradient_clipping / (r.grad_norm + 1e-6);
    if (coef < 1.0) factor *= coef;
  }
  r.lr = lr_at(cfg_.scheduler, cfg_.optimizer.lr, updates_);
  ++updates_;
  float* master = this->master();
  for (int id = 0; id < kNumParamTensors; ++id) {
    const ParamTensorInfo& t = layout.tensor(id);
    adam_step(master + t.offset, grads + t.offset, adam_m_.as<float>() + t.offset, adam_v_.as<float>() + t.offset,
              t.numel, adam_, static_cast<float>(r.lr), updates_, static_cast<float>(factor), t.decay);
  }
  if (cfg_.precision != DType::kF32) convert_from_f32(cfg_.precision, master, params_.data(), n);
  weights_->invalidate();
  last_lr_ = r.lr;
  if (fp16) ZEROD_RETURN_IF_ERROR(scaler_.update(/*overflow=*/false));
  return r;
}

std::vector<int32_t> Trainer::generate(const std::vector<int32_t>& prompt, int max_new, double temperature,
                                       int stop) {
  const int V = cfg_.model.vocab_size, window = model_->max_seq();
  std::vector<int32_t> seq = prompt;
  std::vector<float> logits(V);
  NormalRng rng(sample_rng_state_++);
  for (int i = 0; i < max_new; ++i) {
    const int len = std::min<int>(static_cast<int>(seq.size()), window);
    model_->forward_logits(*weights_, seq.data() + seq.size() - len, 1, len, logits.data(), /*last_only=*/true);
    int32_t next = 0;
    if (temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      const float mx = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (float& z : logits) sum += (z = static_cast<float>(std::exp((z - mx) / temperature)));
      double u = rng.uniform() * sum;
      next = V - 1;
      for (int v = 0; v < V; ++v) {
        u -= logits[v];
        if (u <= 0) {
          next = v;
          break;
        }
      }
    }
    seq.push_back(next);
    if (next == stop) break;
  }
  return std::vector<int32_t>(seq.begin() + prompt.size(), seq.end());
}

namespace {

std::vector<int32_t> to_tokens(const std::string& s) {
  std::vector<int32_t> t;
  for (unsigned char ch : s) t.push_back(ch);
  return t;
}

std::string to_text(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s.push_back(t < 256 ? static_cast<char>(t) : '?');
  return s;
}

}  // namespace

double Trainer::synthetic_accuracy() {
  if (cfg_.data.kind != DataKind::kSynthetic || data_.heldout.empty()) return -1;
  int correct = 0;
  for (const auto& [prompt, answer] : data_.heldout) {
    // A line starts after a newline in the training stream.
    const std::string got = to_text(generate(to_tokens("\n" + prompt), static_cast<int>(answer.size()) + 1, 0, '\n'));
    correct += got == answer + "\n";
  }
  return static_cast<double>(correct) / static_cast<double>(data_.heldout.size());
}

std::string Trainer::sample_text() {
  if (cfg_.run.sample_tokens == 0) return "";
  if (cfg_.data.kind == DataKind::kSynthetic) {
    std::string out;
    for (size_t i = 0; i < std::min<size_t>(4, data_.heldout.size()); ++i) {
      const std::string& prompt = data_.heldout[i].first;
      absl::StrAppend(&out, prompt, to_text(generate(to_tokens("\n" + prompt), 4, cfg_.run.sample_temperature, '\n')));
    }
    return out;
  }
  if (cfg_.data.kind == DataKind::kText) {
    const size_t n = std::min<size_t>(16, data_.tokens.size());
    const std::vector<int32_t> prompt(data_.tokens.begin(), data_.tokens.begin() + n);
    return to_text(prompt) + to_text(generate(prompt, cfg_.run.sample_tokens, cfg_.run.sample_temperature));
  }
  return "";
}

}  // namespace zerod
