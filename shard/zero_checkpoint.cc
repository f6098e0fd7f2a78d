// ZeroEngine's share of a checkpoint: this rank's master weights and
// optimizer states as one shard file (saved_shards.h), and loading them
// back, from a file of the same partition or from any saved partition.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "shard/saved_shards.h"
#include "shard/zero_engine.h"

namespace zerod {

namespace {
const std::map<std::string, std::string> kShardMetadata = {{"format", "zerod-shard"}};
}  // namespace

// Arrays go to the sink straight from where they live: memory, or (with
// the states streamed from a file) the sub-group buffers, one array at a
// time, in the layout an in-memory optimizer has, so a checkpoint loads
// with or without offload. Nothing holds a whole array.
absl::Status ZeroEngine::write_shard_array(size_t i, const std::vector<StateArray>& states, const ByteSink& out) {
  if (i > 0) return optimizer_->read_state(states[i - 1], out);
  return optimizer_->read_masters([&](int, int64_t, int64_t n, const float* m) { return out(m, n * sizeof(float)); });
}

absl::StatusOr<uint32_t> ZeroEngine::save_shard(const std::string& path) {
  const std::vector<StateArray> states = optimizer_->state_arrays();
  return write_safetensors(
      path, shard_file_arrays(owned_numel(ctx_.owned), states), kShardMetadata,
      [&](size_t i, const ByteSink& out) { return write_shard_array(i, states, out); }, &settings_.io_faults);
}

absl::StatusOr<SafetensorsLayout> ZeroEngine::shard_file() const {
  return layout_safetensors(shard_file_arrays(owned_numel(ctx_.owned), optimizer_->state_arrays()), kShardMetadata);
}

absl::StatusOr<uint64_t> ZeroEngine::shard_file_bytes(const ZeroShape& shape, const OptimizerConfig& optimizer) {
  const std::unique_ptr<Optimizer> o = Optimizer::create_unbound(optimizer, piece_shapes(shape.owned), shape.dtype);
  ZEROD_ASSIGN_OR_RETURN(
      const SafetensorsLayout file,
      layout_safetensors(shard_file_arrays(owned_numel(shape.owned), o->state_arrays()), kShardMetadata));
  return file.bytes();
}

absl::Status ZeroEngine::serialize_shard(const SafetensorsLayout& file, const ByteSink& out) {
  const std::vector<StateArray> states = optimizer_->state_arrays();
  return serialize_safetensors(
      file, [&](size_t i, const ByteSink& o) { return write_shard_array(i, states, o); }, out);
}

absl::Status ZeroEngine::install_state(const float* master, const StateFill& fill) {
  for (const StateArray& a : optimizer_->state_arrays()) {
    ZEROD_RETURN_IF_ERROR(
        optimizer_->write_state(a, [&](void* dst, uint64_t offset, uint64_t n) { return fill(a, offset, n, dst); }));
  }
  std::vector<const float*> src;
  const float* at = master;
  for (const ShardSegment& s : ctx_.owned) {
    src.push_back(at);
    at += s.numel;
  }
  ZEROD_RETURN_IF_ERROR(optimizer_->write_masters(src));
  // Separate masters: the working copy is what the optimizer would have
  // written from them.
  for (size_t k = 0; k < src.size() && stores_.separate_masters; ++k) {
    ZEROD_RETURN_IF_ERROR(params_->write(ctx_.owned[k], 0, src[k], ctx_.owned[k].numel));
  }
  return absl::OkStatus();
}

namespace {

// The largest owned segment: m and v are read a segment at a time.
int64_t largest_segment(const std::vector<ShardSegment>& owned) {
  int64_t most = 0;
  for (const ShardSegment& s : owned) most = std::max(most, s.numel);
  return most;
}

}  // namespace

std::vector<BufferSpec> ZeroEngine::resume_buffers(const ZeroShape& shape, const OptimizerConfig& optimizer,
                                                   bool resharded) {
  const int read_back = resharded ? 1 : 0;
  const uint64_t states = Optimizer::create_unbound(optimizer, piece_shapes(shape.owned), shape.dtype)->state_bytes();
  return {{"master weights read back", Category::kWorkspace, owned_numel(shape.owned) * sizeof(float), 1, Tier::kHost,
           /*kept=*/false},
          {"optimizer states read back", Category::kWorkspace, states, read_back, Tier::kHost, /*kept=*/false},
          {"a segment's m and v read back", Category::kWorkspace, 2 * largest_segment(shape.owned) * sizeof(float),
           read_back, Tier::kHost, /*kept=*/false}};
}

// Read whole into host buffers first (resume_buffers), so a failed read
// changes nothing.
absl::Status ZeroEngine::load_shard(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(path, &settings_.io_faults));
  ZEROD_RETURN_IF_ERROR(check_shard_file(r, shard_file_arrays(owned_numel(ctx_.owned), optimizer_->state_arrays())));
  const std::vector<BufferSpec> specs = resume_buffers(ctx_, settings_.optimizer, /*resharded=*/false);
  ZEROD_ASSIGN_OR_RETURN(Buffer master, allocate_spec(ctx_.host, specs[kMastersReadBack]));
  ZEROD_RETURN_IF_ERROR(r.read(*r.find(kMasterArray), master.data()));
  return install_state(master.host<float>(), [&](const StateArray& a, uint64_t offset, uint64_t n, void* dst) {
    return r.read(*r.find(a.name), offset, n, dst);
  });
}

// Master weights and fp32 states are copied exactly; 8-bit states are
// dequantized from their saved blocks and quantized again in this rank's.
absl::Status ZeroEngine::load_resharded(SavedShards& saved) {
  const std::vector<BufferSpec> specs = resume_buffers(ctx_, settings_.optimizer, /*resharded=*/true);
  ZEROD_ASSIGN_OR_RETURN(Buffer master, allocate_spec(ctx_.host, specs[kMastersReadBack]));
  std::unique_ptr<Optimizer> staging =
      Optimizer::create_unbound(settings_.optimizer, piece_shapes(ctx_.owned), ctx_.dtype);
  ZEROD_ASSIGN_OR_RETURN(Buffer states, allocate_spec(ctx_.host, specs[kStatesReadBack]));
  staging->bind(states.data());
  const int64_t segment = largest_segment(ctx_.owned);
  ZEROD_ASSIGN_OR_RETURN(Buffer mv, allocate_spec(ctx_.host, specs[kSegmentReadBack]));
  float* at = master.host<float>();
  float* m = mv.host<float>();
  float* v = m + segment;
  for (size_t k = 0; k < ctx_.owned.size(); ++k) {
    const ShardSegment& s = ctx_.owned[k];
    ZEROD_RETURN_IF_ERROR(saved.read(s.flat_offset, s.flat_offset + s.numel, at, m, v));
    staging->set_piece_states(static_cast<int>(k), m, v);
    at += s.numel;
  }
  const std::vector<StateArray> from = staging->state_arrays();
  return install_state(master.host<float>(), [&](const StateArray& a, uint64_t offset, uint64_t n, void* dst) {
    for (const StateArray& f : from) {
      if (std::strcmp(f.name, a.name) == 0) std::memcpy(dst, static_cast<const char*>(f.data) + offset, n);
    }
    return absl::OkStatus();
  });
}

}  // namespace zerod
