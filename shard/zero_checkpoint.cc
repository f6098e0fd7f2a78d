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
  return optimizer_->read_masters(
      [&](int, int64_t, int64_t n, const float* m) { return out(m, n * sizeof(float)); });
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

void ZeroEngine::plan_resume(const ZeroShape& shape, const OptimizerConfig& optimizer, bool resharded,
                             MemoryPlan& plan) {
  auto add = [&](const char* what, uint64_t bytes) {
    plan.add(what, Tier::kHost, Category::kWorkspace, bytes, Phase::kResume, /*kept=*/false);
  };
  add("master weights read back", owned_numel(shape.owned) * sizeof(float));
  if (!resharded) return;
  add("optimizer states read back",
      Optimizer::create_unbound(optimizer, piece_shapes(shape.owned), shape.dtype)->state_bytes());
  add("a segment's m and v read back", 2 * largest_segment(shape.owned) * sizeof(float));
}

// Read whole into host buffers first (plan_resume states them), so a
// failed read changes nothing.
absl::Status ZeroEngine::load_shard(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(path, &settings_.io_faults));
  ZEROD_RETURN_IF_ERROR(check_shard_file(r, shard_file_arrays(owned_numel(ctx_.owned), optimizer_->state_arrays())));
  ZEROD_ASSIGN_OR_RETURN(Buffer master,
                         ctx_.host.allocate(owned_numel(ctx_.owned) * sizeof(float), Category::kWorkspace, Tier::kHost));
  ZEROD_RETURN_IF_ERROR(r.read(*r.find(kMasterArray), master.data()));
  return install_state(master.host<float>(), [&](const StateArray& a, uint64_t offset, uint64_t n, void* dst) {
    return r.read(*r.find(a.name), offset, n, dst);
  });
}

// Master weights and fp32 states are copied exactly; 8-bit states are
// dequantized from their saved blocks and quantized again in this rank's.
absl::Status ZeroEngine::load_resharded(SavedShards& saved) {
  auto host = [&](uint64_t bytes) { return ctx_.host.allocate(bytes, Category::kWorkspace, Tier::kHost); };
  ZEROD_ASSIGN_OR_RETURN(Buffer master, host(owned_numel(ctx_.owned) * sizeof(float)));
  std::unique_ptr<Optimizer> staging = Optimizer::create_unbound(settings_.optimizer, piece_shapes(ctx_.owned), ctx_.dtype);
  ZEROD_ASSIGN_OR_RETURN(Buffer states, host(staging->state_bytes()));
  staging->bind(states.data());
  const int64_t segment = largest_segment(ctx_.owned);
  ZEROD_ASSIGN_OR_RETURN(Buffer mv, host(2 * segment * sizeof(float)));
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
