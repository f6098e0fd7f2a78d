// ZeroEngine's share of a checkpoint: this rank's master weights and
// optimizer states as one safetensors file (zero_engine.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/safetensors.h"
#include "shard/zero_engine.h"

namespace zerod {
namespace {

constexpr const char* kMaster = "master";

// The arrays of a shard file, in order, with the memory each comes from
// (none for the master weights, which are gathered from the owned segments).
struct ShardArray {
  SafeTensor header;
  void* data;
};

std::vector<ShardArray> shard_arrays(int64_t master_numel, const std::vector<StateArray>& states) {
  std::vector<ShardArray> a = {{{kMaster, DType::kF32, {master_numel}}, nullptr}};
  for (const StateArray& s : states) a.push_back({{s.name, s.dtype, {s.numel}}, s.data});
  return a;
}

int64_t owned_numel(const std::vector<ShardSegment>& owned) {
  int64_t n = 0;
  for (const ShardSegment& s : owned) n += s.numel;
  return n;
}

}  // namespace

// With the states swapped to a file, the arrays are read from and written
// to it through the sub-group buffers, one array at a time, in the layout an
// in-memory optimizer has: a checkpoint loads with or without offload.
absl::StatusOr<uint32_t> ZeroEngine::save_shard(const std::string& path) {
  const std::vector<ShardArray> arrays =
      shard_arrays(owned_numel(owned_), swapped_ ? swapped_->state_layout() : optimizer_->state_arrays());
  std::vector<SafeTensor> headers;
  for (const ShardArray& a : arrays) headers.push_back(a.header);
  return write_safetensors(path, headers, {{"format", "zerod-shard"}}, [&](size_t i, std::vector<char>& buf) {
    if (i > 0) {
      if (swapped_) return swapped_->read_state(arrays[i].header.name, buf.data());
      std::memcpy(buf.data(), arrays[i].data, buf.size());
      return absl::OkStatus();
    }
    std::vector<float*> dst;
    char* out = buf.data();
    for (const ShardSegment& s : owned_) {
      dst.push_back(reinterpret_cast<float*>(out));
      if (!swapped_) std::memcpy(out, master_at(s), s.numel * 4);
      out += s.numel * 4;
    }
    return swapped_ ? swapped_->read_masters(dst) : absl::OkStatus();
  });
}

absl::Status ZeroEngine::load_shard(const std::string& path) {
  ZEROD_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(path));
  const std::vector<ShardArray> arrays =
      shard_arrays(owned_numel(owned_), swapped_ ? swapped_->state_layout() : optimizer_->state_arrays());
  if (r.tensors().size() != arrays.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds ", r.tensors().size(), " arrays, this rank's state has ",
                                                   arrays.size(), " (a different optimizer or partition?)"));
  }
  for (const ShardArray& a : arrays) {
    const SafeTensor* t = r.find(a.header.name);
    if (!t || t->dtype != a.header.dtype || t->numel() != a.header.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": array '", a.header.name, "' is missing or not ",
                                                     dtype_name(a.header.dtype), "[", a.header.numel(), "]"));
    }
  }
  std::vector<float> master(owned_numel(owned_));
  ZEROD_RETURN_IF_ERROR(r.read(*r.find(kMaster), master.data()));
  for (const ShardArray& a : arrays) {
    if (a.header.name == kMaster) continue;
    if (!swapped_) {
      ZEROD_RETURN_IF_ERROR(r.read(*r.find(a.header.name), a.data));
      continue;
    }
    std::vector<char> state(a.header.numel() * dtype_size(a.header.dtype));
    ZEROD_RETURN_IF_ERROR(r.read(*r.find(a.header.name), state.data()));
    ZEROD_RETURN_IF_ERROR(swapped_->write_state(a.header.name, state.data()));
  }
  std::vector<const float*> src;
  const float* at = master.data();
  for (const ShardSegment& s : owned_) {
    src.push_back(at);
    if (!swapped_) std::memcpy(master_at(s), at, s.numel * 4);
    // The working copy is what the optimizer would have written from them.
    if (separate_master_) write_working(s, 0, at, s.numel);
    at += s.numel;
  }
  if (swapped_) ZEROD_RETURN_IF_ERROR(swapped_->write_masters(src));
  return param_store_ ? param_store_->flush() : absl::OkStatus();
}

}  // namespace zerod
