#include "runtime/model/lora_merge.h"

#include <algorithm>

#include "runtime/kernels/cpu/nf4.h"

namespace zerod {
namespace {

// The target whose product's weight `id` is, or -1.
int product_target(int id) {
  const auto at = std::ranges::find(kLoraProductWeights, id);
  return at == kLoraProductWeights.end() ? -1 : static_cast<int>(at - kLoraProductWeights.begin());
}

}  // namespace

MergedWeights::MergedWeights(const GptLayout& model, const GptLayout& adapters, ParamInit base,
                             ParamRangeReader adapters_read, bool nf4_base)
    : model_(model),
      adapters_(adapters),
      base_(std::move(base)),
      adapters_read_(std::move(adapters_read)),
      nf4_base_(nf4_base) {}

absl::StatusOr<const std::vector<float>*> MergedWeights::merged(const ParamSegment& s, int target) {
  if (cached_ == std::pair(s.id, s.layer)) return &cache_;
  cached_.reset();
  cache_.resize(s.numel);
  ZEROD_RETURN_IF_ERROR(base_(s.offset, s.offset + s.numel, cache_.data()));
  if (nf4_base_) nf4_round_trip(cache_.data(), s.numel, cache_.data());
  if (target >= 0) {
    const int a_id = lora_a_id(target), b_id = a_id + 1;
    const int64_t in = adapters_.tensor(a_id).shape[0], r = adapters_.tensor(a_id).shape[1];
    const int64_t out = adapters_.tensor(b_id).shape[1];
    std::vector<float> a(in * r), b(r * out);
    const int64_t a_at = adapters_.offset(a_id, s.layer), b_at = adapters_.offset(b_id, s.layer);
    ZEROD_RETURN_IF_ERROR(adapters_read_(a_at, a_at + in * r, a.data()));
    ZEROD_RETURN_IF_ERROR(adapters_read_(b_at, b_at + r * out, b.data()));
    const double scale = adapters_.lora()->scale();
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t j = 0; j < out; ++j) {
        double d = 0;
        for (int64_t k = 0; k < r; ++k) d += double(a[i * r + k]) * b[k * out + j];
        cache_[i * out + j] = static_cast<float>(cache_[i * out + j] + scale * d);
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
    const int product = product_target(s.id);
    const int target = product >= 0 && adapters_.lora()->targets[product] ? product : -1;
    // Biases, LayerNorms and embeddings are the base's as they are (fp32
    // in an NF4 base too).
    if (target < 0 && !(nf4_base_ && product >= 0)) {
      ZEROD_RETURN_IF_ERROR(base_(lo, hi, dst));
      continue;
    }
    ZEROD_ASSIGN_OR_RETURN(const std::vector<float>* m, merged(s, target));
    std::copy(m->begin() + (lo - s.offset), m->begin() + (hi - s.offset), dst);
  }
  return absl::OkStatus();
}

}  // namespace zerod
