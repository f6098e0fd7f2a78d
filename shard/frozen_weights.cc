#include "shard/frozen_weights.h"

#include <algorithm>
#include <cstring>

#include "offload/swap_dir.h"
#include "runtime/kernels/cpu_table.h"

namespace zerod {
namespace {

// Words (4 bytes) of `numel` values of `t`.
int64_t words(int64_t numel, DType t) { return (numel * static_cast<int64_t>(dtype_size(t)) + 3) / 4; }

// A packed layer's units: the embeddings and final LayerNorm as operands,
// each layer as Nf4Packing's bytes, counted in 4-byte words (what the
// gathers move; their bits are copied, never read as floats).
std::vector<int64_t> packed_units(const GptLayout& layout, DType operands) {
  const int64_t layer_words = static_cast<int64_t>(Nf4Packing(layout).layer_bytes() / 4);
  std::vector<int64_t> begin = {0, words(layout.unit_numel(0), operands)};
  for (int l = 0; l < layout.config().n_layer; ++l) begin.push_back(begin.back() + layer_words);
  begin.push_back(begin.back() + words(layout.unit_numel(layout.final_unit()), operands));
  return begin;
}

bool packed(bool nf4, const ZeroConfig& z) { return nf4 && z.stage == 3; }

ZeroShape frozen_shape(const GptLayout& layout, const ZeroSettings& s, bool nf4, int world_size, int rank) {
  ZeroShape shape =
      packed(nf4, s.zero)
          ? ZeroShape(layout, packed_units(layout, s.operands), world_size, rank, DType::kF32, Category::kFrozen)
          : ZeroShape(layout, s.zero.stage, world_size, rank, s.precision, Category::kFrozen);
  shape.operands = s.operands;
  return shape;
}

// The host buffer the initial values pass through: a layer's unit at most,
// a whole one where layers are packed from it.
int64_t fill_numel(const ZeroShape& shape, bool packs) {
  const int64_t layer = shape.layout.unit_numel(GptLayout::layer_unit(0));
  if (packs) return layer;
  int64_t n = 0;
  for (const ShardSegment& s : shape.owned) n = std::max(n, s.numel);
  return std::min(n, layer);
}

// What FrozenWeights allocates beside its store, by Own: the layer
// unpacked from stage 3's packed units, and the host buffers the initial
// values pass through (`packs`: packed into a layer's bytes).
enum Own { kUnpacked, kInitialValues, kLayerPacked };
std::vector<BufferSpec> own_buffers(const ZeroShape& shape, bool packs) {
  const int packed = packs ? 1 : 0;
  BufferSpec unpacked = Nf4Packing::unpacked_buffer(shape.layout, shape.operands);
  unpacked.count = packed;
  return {std::move(unpacked),
          {"frozen weights, initial values", Category::kWorkspace,
           static_cast<uint64_t>(std::max<int64_t>(fill_numel(shape, packs), 1) * 4), 1, Tier::kHost, /*kept=*/false},
          {"frozen weights, a layer packed", Category::kWorkspace, Nf4Packing(shape.layout).layer_bytes(), packed,
           Tier::kHost, /*kept=*/false}};
}

// The frozen weights' store: written once, from the host (the initial
// values); its NVMe file `rank`'s.
ParamStoreChoice param_store(const ZeroSettings& s, const PlanDevice& device, int rank, MemoryAccountant* accountant) {
  const ZeroConfig& z = s.zero;
  const OffloadConfig& off = z.offload_param;
  ParamStoreChoice p;
  p.staging = offload_buffer_tier(off, device);
  p.written_from_host = true;
  if (z.stage < 3) return p;
  if (off.device == OffloadDevice::kNone) {
    p.kind = ParamStoreChoice::kSharded;
    return p;
  }
  p.kind = ParamStoreChoice::kOffloaded;
  const std::string file = off.device == OffloadDevice::kNvme ? swap_file_path(*off.nvme_path, "frozen", rank) : "";
  p.offload = {off.device, Category::kFrozen, file, off.buffer_count, p.staging, s.aio, s.io_faults, accountant};
  return p;
}

}  // namespace

FrozenWeights::FrozenWeights(const GptLayout& layout, const ZeroSettings& settings, bool nf4, Communicator& comm,
                             Device& device, Kernels& kernels)
    : host_(device.accountant()),
      host_kernels_(cpu_kernels()),
      packing_(packed(nf4, settings.zero) ? std::optional<Nf4Packing>(layout) : std::nullopt),
      ctx_(frozen_shape(layout, settings, nf4, comm.world_size(), comm.rank()), comm, device, kernels, host_,
           *host_kernels_) {}

FrozenWeights::~FrozenWeights() { ctx_.device.synchronize(ctx_.stream).IgnoreError(); }

std::vector<BufferSpec> FrozenWeights::buffers(const GptLayout& layout, const ZeroSettings& settings, bool nf4,
                                               int world_size, int rank, const PlanDevice& device) {
  const ZeroConfig& z = settings.zero;
  if (nf4 && z.stage < 3) return Nf4Weights::buffers(layout, settings.operands);
  const ZeroShape shape = frozen_shape(layout, settings, nf4, world_size, rank);
  std::vector<BufferSpec> specs = param_store_buffers(shape, z, param_store(settings, device, rank, nullptr), device);
  for (BufferSpec& b : own_buffers(shape, packed(nf4, z))) specs.push_back(std::move(b));
  return specs;
}

absl::StatusOr<std::unique_ptr<FrozenWeights>> FrozenWeights::create(const GptLayout& layout,
                                                                     const ZeroSettings& settings, bool nf4,
                                                                     Communicator& comm, Device& device,
                                                                     Kernels& kernels) {
  const ZeroConfig& z = settings.zero;
  std::unique_ptr<FrozenWeights> f(new FrozenWeights(layout, settings, nf4, comm, device, kernels));
  if (nf4 && z.stage < 3) {
    ZEROD_ASSIGN_OR_RETURN(Nf4Weights w,
                           Nf4Weights::create(&layout, settings.init, settings.nf4_held, device, kernels));
    f->nf4_.emplace(std::move(w));
    return f;
  }
  LayerUnpack unpack;
  if (f->packing_) {
    FrozenWeights* w = f.get();
    unpack = [w](void* unit) {
      return w->packing_->unpack(w->ctx_.converter(), static_cast<uint8_t*>(unit), w->unpacked_.data());
    };
  }
  const ParamStoreChoice store = param_store(settings, plan_device(device), comm.rank(), &device.accountant());
  if (store.kind == ParamStoreChoice::kOffloaded && z.offload_param.device == OffloadDevice::kNvme) {
    ZEROD_RETURN_IF_ERROR(
        check_swap_dirs({{*z.offload_param.nvme_path, ShardStore::file_bytes(f->ctx_.part.chunks(), f->ctx_.dtype),
                          "zero_optimization.offload_param.nvme_path"}}));
  }
  ZEROD_ASSIGN_OR_RETURN(f->params_, create_param_store(f->ctx_, z, store, std::move(unpack)));
  if (f->packing_) {
    ZEROD_ASSIGN_OR_RETURN(f->unpacked_, allocate_spec(device, own_buffers(f->ctx_, true)[kUnpacked]));
  }
  ZEROD_RETURN_IF_ERROR(f->fill(settings.init, settings.nf4_held));
  return f;
}

absl::Status FrozenWeights::fill(const ParamInit& init, const Nf4ModuleReader& nf4_held) {
  // The stores zero their buffers on the compute stream; the values land after.
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
  const GptLayout& L = ctx_.layout;
  const Partition& p = ctx_.part;
  const int64_t step = fill_numel(ctx_, packing_.has_value());
  const std::vector<BufferSpec> own = own_buffers(ctx_, packing_.has_value());
  ZEROD_ASSIGN_OR_RETURN(Buffer host, allocate_spec(ctx_.device, own[kInitialValues]));
  Buffer layer;
  if (own[kLayerPacked].count > 0) {
    ZEROD_ASSIGN_OR_RETURN(layer, allocate_spec(ctx_.device, own[kLayerPacked]));
  }
  for (const ShardSegment& s : ctx_.owned) {
    const int u = s.unit;
    const int64_t in_unit = s.flat_offset - p.unit_begin(u);  // where the segment starts in its unit
    if (packing_ && u != 0 && u != L.final_unit()) {
      // A layer is packed whole; the rank keeps its chunk of the bytes.
      const int l = u - GptLayout::layer_unit(0);
      ZEROD_RETURN_IF_ERROR(packing_->read(init, l, nf4_held, host.host<float>()));
      ZEROD_RETURN_IF_ERROR(packing_->pack(host.host<float>(), layer.host<uint8_t>(), l, nf4_held));
      ZEROD_RETURN_IF_ERROR(params_->write(s, 0, layer.host<float>() + in_unit, s.numel));
      continue;
    }
    if (packing_) {
      ZEROD_RETURN_IF_ERROR(fill_global(init, s, in_unit, host.host<float>(), step, layer));
      continue;
    }
    // fp32 values, at the same place in the layout's unit.
    const int64_t begin = L.unit_begin(u) + in_unit;
    for (int64_t start = 0; start < s.numel; start += step) {
      const int64_t n = std::min(step, s.numel - start);
      ZEROD_RETURN_IF_ERROR(init(begin + start, begin + start + n, host.host<float>()));
      ZEROD_RETURN_IF_ERROR(params_->write(s, start, host.host<float>(), n));
    }
  }
  ZEROD_RETURN_IF_ERROR(params_->publish());
  return ctx_.device.synchronize(ctx_.stream);
}

absl::Status FrozenWeights::fill_global(const ParamInit& init, const ShardSegment& s, int64_t in_unit, float* host,
                                        int64_t step, Buffer& converted) {
  // The segment's words [in_unit, in_unit + s.numel) of the unit hold
  // operands from element in_unit * per_word, converted on the host as the
  // device's conversion rounds them, through the packed layer's buffer.
  const GptLayout& L = ctx_.layout;
  const int64_t op_bytes = static_cast<int64_t>(dtype_size(ctx_.operands)), per_word = 4 / op_bytes;
  const int64_t unit_numel = L.unit_numel(s.unit);
  const int64_t chunk = std::min<int64_t>(step / per_word, static_cast<int64_t>(converted.bytes() / 4));
  for (int64_t start = 0; start < s.numel; start += chunk) {
    const int64_t n = std::min(chunk, s.numel - start);  // words
    const int64_t first = (in_unit + start) * per_word, values = std::min(n * per_word, unit_numel - first);
    ZEROD_RETURN_IF_ERROR(init(L.unit_begin(s.unit) + first, L.unit_begin(s.unit) + first + values, host));
    std::memset(converted.data(), 0, n * 4);  // an odd count's last half-word
    convert_from_f32(ctx_.operands, host, converted.data(), values);
    ZEROD_RETURN_IF_ERROR(params_->write(s, start, converted.host<float>(), n));
  }
  return absl::OkStatus();
}

}  // namespace zerod
