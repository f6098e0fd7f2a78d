#include "runtime/model/lora_merge.h"

#include <algorithm>

#include "runtime/model/nf4_weights.h"

namespace zerod {
MergedWeights::MergedWeights(const GptLayout& model, const GptLayout& adapters, ParamInit base,
                             ParamRangeReader adapters_read, bool nf4_base)
    : model_(model),
      adapters_(adapters),
      base_(std::move(base)),
      adapters_read_(std::move(adapters_read)),
      nf4_base_(nf4_base) {}

absl::StatusOr<const std::vector<float>*> MergedWeights::merged(const ParamSegment& s) {
  if (cached_ == std::pair(s.id, s.layer)) return &cache_;
  cached_.reset();
  cache_.resize(s.numel);
  ZEROD_RETURN_IF_ERROR(base_(s.offset, s.offset + s.numel, cache_.data()));
  if (nf4_base_) nf4_round_trip_product(model_.config(), s.id, cache_.data());
  // Each adapted target of this product adds s·A·B to its columns.
  const GptConfig& c = model_.config();
  for (int t = 0; t < lora_targets_of(c.arch); ++t) {
    if (lora_target_product(c.arch, t) != s.id || !adapters_.lora()->targets[t]) continue;
    const LoraTargetDims d = lora_target_dims(c, t);
    const int a_id = lora_a_id(t), b_id = a_id + 1;
    const int64_t in = d.in, r = adapters_.lora()->r, out = d.out;
    std::vector<float> a(in * r), b(r * out);
    const int64_t a_at = adapters_.offset(a_id, s.layer), b_at = adapters_.offset(b_id, s.layer);
    ZEROD_RETURN_IF_ERROR(adapters_read_(a_at, a_at + in * r, a.data()));
    ZEROD_RETURN_IF_ERROR(adapters_read_(b_at, b_at + r * out, b.data()));
    const double scale = adapters_.lora()->scale();
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k) sum += double(a[i * r + k]) * b[k * out + j];
        float& w = cache_[i * d.width + d.col0 + j];
        w = static_cast<float>(w + scale * sum);
      }
    }
  }
  cached_ = std::pair(s.id, s.layer);
  return &cache_;
}

absl::Status MergedWeights::read(int64_t begin, int64_t end, float* out) {
  for (const ParamSegment& s : model_.segments()) {
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    float* dst = out + (lo - begin);
    const GptConfig& c = model_.config();
    const bool product = is_product_weight(s.id);
    bool adapted = false;
    for (int t = 0; t < lora_targets_of(c.arch); ++t) {
      adapted = adapted || (lora_target_product(c.arch, t) == s.id && adapters_.lora()->targets[t]);
    }
    // Biases, norms and embeddings are the base's as they are (fp32 in an
    // NF4 base too).
    if (!adapted && !(nf4_base_ && product)) {
      ZEROD_RETURN_IF_ERROR(base_(lo, hi, dst));
      continue;
    }
    ZEROD_ASSIGN_OR_RETURN(const std::vector<float>* m, merged(s));
    std::copy(m->begin() + (lo - s.offset), m->begin() + (hi - s.offset), dst);
  }
  return absl::OkStatus();
}

}  // namespace zerod
