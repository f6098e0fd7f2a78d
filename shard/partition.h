// How ZeRO splits the flat parameter buffer among ranks, for any world size.
//
// Each unit of the layout (the embeddings, one layer, the final LayerNorm; a
// contiguous range of the flat buffer) is cut into world_size equal chunks
// of `chunk(u)` elements, a multiple of kAlign; the padding needed for that
// sits at the unit's end, in the last ranks' chunks. So a layer is gathered
// or reduce-scattered by one real all-gather / reduce-scatter over equal
// blocks, and the padded unit is exactly that collective's buffer.
//
// A rank's shard is its chunk of every unit, back to back, and everything a
// rank keeps for its part of the model (fp32 master weights, optimizer
// states, gradients under stage >= 2, 16-bit parameters under stage 3) is a
// buffer in this shard layout.
#pragma once

#include <algorithm>

#include <cstdint>
#include <vector>

#include "runtime/model/gpt_layout.h"

namespace zerod {

class Partition {
 public:
  static constexpr int64_t kAlign = 64;  // elements: 256 bytes of fp32

  // `unit_begin` holds num_units + 1 increasing flat offsets (the last is
  // the buffer's size).
  Partition(std::vector<int64_t> unit_begin, int world_size);
  Partition(const GptLayout& layout, int world_size);

  int world_size() const { return world_; }
  int num_units() const { return static_cast<int>(unit_begin_.size()) - 1; }
  int64_t unit_begin(int u) const { return unit_begin_[u]; }
  int64_t unit_numel(int u) const { return unit_begin_[u + 1] - unit_begin_[u]; }
  int64_t num_params() const { return unit_begin_.back(); }

  // Each rank's share of unit u, padding included.
  int64_t chunk(int u) const { return chunk_[u]; }
  const std::vector<int64_t>& chunks() const { return chunk_; }
  int64_t largest_chunk() const { return *std::max_element(chunk_.begin(), chunk_.end()); }
  // Unit u in the padded full buffer (world_size chunks per unit).
  int64_t padded_offset(int u) const { return padded_offset_[u]; }
  int64_t padded_numel() const { return padded_offset_.back(); }
  std::vector<int64_t> padded_unit_offsets() const;
  // Unit u's chunk within a shard.
  int64_t shard_offset(int u) const { return shard_offset_[u]; }
  int64_t shard_numel() const { return shard_offset_.back(); }

  // The real elements (flat offsets [begin, end), possibly empty) that
  // `rank` owns in unit u.
  struct Range {
    int64_t begin, end;
  };
  Range owned(int u, int rank) const;

 private:
  std::vector<int64_t> unit_begin_;
  int world_;
  std::vector<int64_t> chunk_, padded_offset_, shard_offset_;
};

// The pieces of the layout's tensors that `rank` owns, each with its place
// in the rank's shard: what the optimizer walks (weight decay differs by
// tensor).
struct ShardSegment {
  int64_t flat_offset, shard_offset, numel;
  bool decay;
  int unit;
  int64_t tensor_numel;  // of the whole tensor (the 8-bit optimizer's size rule)
};
std::vector<ShardSegment> owned_segments(const GptLayout& layout, const Partition& part, int rank);

}  // namespace zerod
