#include "shard/saved_shards.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/ops/adam8bit.h"

namespace zerod {

std::vector<ParamPiece> piece_shapes(const std::vector<ShardSegment>& owned) {
  std::vector<ParamPiece> shape;
  for (const ShardSegment& s : owned) shape.push_back({nullptr, nullptr, nullptr, s.numel, s.tensor_numel, s.decay});
  return shape;
}

int64_t owned_numel(const std::vector<ShardSegment>& owned) {
  int64_t n = 0;
  for (const ShardSegment& s : owned) n += s.numel;
  return n;
}

std::vector<SafeTensor> shard_file_arrays(int64_t owned_numel, const std::vector<StateArray>& states) {
  std::vector<SafeTensor> a = {{kMasterArray, DType::kF32, {owned_numel}}};
  for (const StateArray& s : states) a.push_back({s.name, s.dtype, {s.numel}});
  return a;
}

absl::Status check_shard_file(const SafetensorsReader& r, const std::vector<SafeTensor>& want) {
  if (r.tensors().size() != want.size()) {
    return absl::InvalidArgumentError(absl::StrCat(r.path(), ": holds ", r.tensors().size(),
                                                   " arrays, the shard it stands for has ", want.size(),
                                                   " (a different optimizer or partition?)"));
  }
  for (const SafeTensor& w : want) {
    const SafeTensor* t = r.find(w.name);
    if (!t || t->dtype != w.dtype || t->numel() != w.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(r.path(), ": array '", w.name, "' is missing or not ",
                                                     dtype_name(w.dtype), "[", w.numel(), "]"));
    }
  }
  return absl::OkStatus();
}

SavedShards::SavedShards(const GptLayout& layout, const OptimizerConfig& opt, std::vector<std::string> files,
                         const IoFaultHook* faults)
    : faults_(faults) {
  const Partition part(layout, static_cast<int>(files.size()));
  for (int r = 0; r < part.world_size(); ++r) {
    const std::vector<ShardSegment> owned = owned_segments(layout, part, r);
    int64_t at = 0;
    for (size_t k = 0; k < owned.size(); ++k) {
      segments_.push_back({owned[k].flat_offset, owned[k].numel, r, static_cast<int>(k), at});
      at += owned[k].numel;
    }
    // The pieces' dtype of 16-bit copies does not change where states lie.
    ranks_.push_back(
        {std::move(files[r]), Optimizer::create_unbound(opt, piece_shapes(owned), DType::kBF16), at, std::nullopt});
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.flat_offset < b.flat_offset; });
}

SavedShards::~SavedShards() = default;

absl::StatusOr<const SafetensorsReader*> SavedShards::open(int rank) {
  Rank& r = ranks_[rank];
  if (!r.reader) {
    ZEROD_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(r.path, faults_));
    ZEROD_RETURN_IF_ERROR(check_shard_file(reader, shard_file_arrays(r.owned_numel, r.layout->state_arrays())));
    r.reader = std::move(reader);
  }
  return &*r.reader;
}

absl::Status SavedShards::read_state(const Segment& s, const char* which, int64_t e0, int64_t e1, float* out) {
  ZEROD_ASSIGN_OR_RETURN(const SafetensorsReader* r, open(s.rank));
  const Optimizer::PieceStates ps = ranks_[s.rank].layout->piece_states(s.piece);
  if (!ps.quantized) return r->read(*r->find(which), (ps.state + e0) * 4, (e1 - e0) * 4, out);
  // The blocks the range touches, a few at a time through scratch of fixed
  // size: a resume reads whole segments, and nothing here may grow with them.
  constexpr int64_t kBlocks = 16;
  uint8_t codes[kBlocks * kQuantBlock];
  float absmax[kBlocks], x[kBlocks * kQuantBlock];
  const std::string name = which;
  const QuantMap& map = name == "m" ? signed_dynamic_map() : unsigned_dynamic_map();
  for (int64_t b = e0 / kQuantBlock, end = quant_blocks(e1); b < end; b += kBlocks) {
    const int64_t nb = std::min(kBlocks, end - b);
    const int64_t first = b * kQuantBlock, n = std::min((b + nb) * kQuantBlock, s.numel) - first;
    ZEROD_RETURN_IF_ERROR(r->read(*r->find(name + "_codes"), ps.state + first, n, codes));
    ZEROD_RETURN_IF_ERROR(r->read(*r->find(name + "_absmax"), (ps.block + b) * 4, nb * 4, absmax));
    dequantize_blockwise(map, codes, absmax, n, x);
    const int64_t lo = std::max(first, e0), hi = std::min(first + n, e1);
    std::memcpy(out + (lo - e0), x + (lo - first), (hi - lo) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status SavedShards::read(int64_t begin, int64_t end, float* master, float* m, float* v) {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), begin,
                             [](int64_t x, const Segment& s) { return x < s.flat_offset; });
  for (--it; begin < end; ++it) {
    const Segment& s = *it;
    const int64_t e0 = begin - s.flat_offset, e1 = std::min(end - s.flat_offset, s.numel);
    const int64_t done = e1 - e0;
    if (master) {
      ZEROD_ASSIGN_OR_RETURN(const SafetensorsReader* r, open(s.rank));
      ZEROD_RETURN_IF_ERROR(r->read(*r->find(kMasterArray), (s.array_offset + e0) * 4, done * 4, master));
      master += done;
    }
    if (m) {
      ZEROD_RETURN_IF_ERROR(read_state(s, "m", e0, e1, m));
      m += done;
    }
    if (v) {
      ZEROD_RETURN_IF_ERROR(read_state(s, "v", e0, e1, v));
      v += done;
    }
    begin += done;
  }
  return absl::OkStatus();
}

}  // namespace zerod
