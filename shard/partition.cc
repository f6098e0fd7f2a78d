#include "shard/partition.h"

#include <algorithm>
#include <utility>

namespace zerod {

Partition::Partition(std::vector<int64_t> unit_begin, int world_size)
    : unit_begin_(std::move(unit_begin)), world_(world_size) {
  padded_offset_.push_back(0);
  shard_offset_.push_back(0);
  for (int u = 0; u < num_units(); ++u) {
    const int64_t per_rank = (unit_numel(u) + world_ - 1) / world_;
    chunk_.push_back((per_rank + kAlign - 1) / kAlign * kAlign);
    padded_offset_.push_back(padded_offset_.back() + chunk_.back() * world_);
    shard_offset_.push_back(shard_offset_.back() + chunk_.back());
  }
}

Partition::Partition(const GptLayout& layout, int world_size)
    : Partition(
          [&] {
            std::vector<int64_t> b;
            for (int u = 0; u < layout.num_units(); ++u) b.push_back(layout.unit_begin(u));
            b.push_back(layout.num_params());
            return b;
          }(),
          world_size) {}

std::vector<int64_t> Partition::padded_unit_offsets() const {
  return std::vector<int64_t>(padded_offset_.begin(), padded_offset_.end() - 1);
}

Partition::Range Partition::owned(int u, int rank) const {
  const int64_t begin = std::min(unit_begin_[u] + rank * chunk_[u], unit_begin_[u + 1]);
  const int64_t end = std::min(begin + chunk_[u], unit_begin_[u + 1]);
  return {begin, end};
}

std::vector<ShardSegment> owned_segments(const GptLayout& layout, const Partition& part, int rank) {
  std::vector<ShardSegment> out;
  for (const ParamSegment& s : layout.segments()) {
    const int u = layout.unit_of(s.id, s.layer);
    const Partition::Range r = part.owned(u, rank);
    const int64_t lo = std::max(r.begin, s.offset), hi = std::min(r.end, s.offset + s.numel);
    if (lo < hi) out.push_back({lo, part.shard_offset(u) + (lo - r.begin), hi - lo, s.decay, u, s.numel});
  }
  return out;
}

}  // namespace zerod
