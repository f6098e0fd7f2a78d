#include "shard/frozen_weights.h"

#include <algorithm>

#include "offload/swap_dir.h"
#include "runtime/kernels/cpu_table.h"

namespace zerod {
namespace {

// A packed layer's units: the embeddings and final LayerNorm as their fp32
// values, each layer as Nf4Packing's bytes, counted in 4-byte words (what
// the gathers move; their bits are copied, never read as floats).
std::vector<int64_t> packed_units(const GptLayout& layout) {
  const int64_t layer_words = static_cast<int64_t>(Nf4Packing(layout).layer_bytes() / 4);
  std::vector<int64_t> begin = {0, layout.unit_numel(0)};
  for (int l = 0; l < layout.config().n_layer; ++l) begin.push_back(begin.back() + layer_words);
  begin.push_back(begin.back() + layout.unit_numel(layout.final_unit()));
  return begin;
}

bool packed(bool nf4, const ZeroConfig& z) { return nf4 && z.stage == 3; }

ZeroShape frozen_shape(const GptLayout& layout, const ZeroSettings& s, bool nf4, int world_size, int rank) {
  ZeroShape shape = packed(nf4, s.zero)
                        ? ZeroShape(layout, packed_units(layout), world_size, rank, DType::kF32, Category::kFrozen)
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

bool offloaded(const ZeroConfig& z) { return z.stage == 3 && z.offload_param.device != OffloadDevice::kNone; }

ShardStoreSettings frozen_store_settings(const ZeroSettings& s, const std::string& file, const PlanDevice& device,
                                         MemoryAccountant* accountant) {
  const OffloadConfig& off = s.zero.offload_param;
  return {off.device, Category::kFrozen, file,      off.buffer_count, offload_buffer_tier(off, device),
          s.aio,      s.io_faults,       accountant};
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

void FrozenWeights::plan(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size, int rank,
                         MemoryPlan& into) {
  MemoryPlan plan(into.device());
  plan_build(layout, settings, nf4, world_size, rank, plan);
  into.add_all(plan, Phase::kFrozenWeights);
}

void FrozenWeights::plan_build(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size,
                               int rank, MemoryPlan& plan) {
  const ZeroConfig& z = settings.zero;
  if (nf4 && z.stage < 3) {
    Nf4Weights::plan(layout, settings.operands, plan);
    return;
  }
  const ZeroShape shape = frozen_shape(layout, settings, nf4, world_size, rank);
  const Tier staging = offload_buffer_tier(z.offload_param, plan.device());
  if (z.stage < 3) {
    plan_replicated_params(shape, /*written_from_host=*/true, staging, plan);
  } else if (offloaded(z)) {
    plan_offloaded_params(shape, z, frozen_store_settings(settings, "", plan.device(), nullptr),
                          /*written_during_backward=*/false, plan);
  } else {
    plan_sharded_params(shape, z, /*written_from_host=*/true, staging, plan);
  }
  if (nf4) Nf4Packing::plan_unpacked(layout, settings.operands, plan);
  plan.add("frozen weights, initial values", Tier::kHost, Category::kWorkspace,
           std::max<int64_t>(fill_numel(shape, nf4), 1) * 4, Phase::kBuild, /*kept=*/false);
  if (nf4) {
    plan.add("frozen weights, a layer packed", Tier::kHost, Category::kWorkspace, Nf4Packing(layout).layer_bytes(),
             Phase::kBuild, /*kept=*/false);
  }
}

absl::StatusOr<std::unique_ptr<FrozenWeights>> FrozenWeights::create(const GptLayout& layout,
                                                                     const ZeroSettings& settings, bool nf4,
                                                                     Communicator& comm, Device& device,
                                                                     Kernels& kernels) {
  const ZeroConfig& z = settings.zero;
  std::unique_ptr<FrozenWeights> f(new FrozenWeights(layout, settings, nf4, comm, device, kernels));
  if (nf4 && z.stage < 3) {
    ZEROD_ASSIGN_OR_RETURN(Nf4Weights w, Nf4Weights::create(&layout, settings.init, device, kernels));
    f->nf4_.emplace(std::move(w));
    return f;
  }
  LayerUnpack unpack;
  if (f->packing_) {
    FrozenWeights* w = f.get();
    unpack = [w](void* unit) {
      return w->packing_->unpack(w->ctx_.device, w->ctx_.converter(), static_cast<uint8_t*>(unit), w->unpacked_.data());
    };
  }
  const PlanDevice where = plan_device(device);
  const Tier staging = offload_buffer_tier(z.offload_param, where);
  if (z.stage < 3) {
    ZEROD_ASSIGN_OR_RETURN(f->params_, replicated_params(f->ctx_, staging));
  } else if (offloaded(z)) {
    std::string file;
    if (z.offload_param.device == OffloadDevice::kNvme) {
      ZEROD_RETURN_IF_ERROR(
          check_swap_dirs({{*z.offload_param.nvme_path, ShardStore::file_bytes(f->ctx_.part.chunks(), f->ctx_.dtype),
                            "zero_optimization.offload_param.nvme_path"}}));
      file = swap_file_path(*z.offload_param.nvme_path, "frozen", comm.rank());
    }
    ZEROD_ASSIGN_OR_RETURN(
        f->params_, offloaded_params(f->ctx_, z, frozen_store_settings(settings, file, where, &device.accountant()),
                                     /*written_during_backward=*/false, std::move(unpack)));
  } else {
    ZEROD_ASSIGN_OR_RETURN(f->params_, sharded_params(f->ctx_, z, staging, std::move(unpack)));
  }
  if (f->packing_) {
    ZEROD_ASSIGN_OR_RETURN(f->unpacked_, Nf4Packing::allocate_unpacked(layout, kernels.operand_type(), device));
  }
  ZEROD_RETURN_IF_ERROR(f->fill(settings.init));
  return f;
}

absl::Status FrozenWeights::fill(const ParamInit& init) {
  // The stores zero their buffers on the compute stream; the values land after.
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
  const GptLayout& L = ctx_.layout;
  const Partition& p = ctx_.part;
  const int64_t step = fill_numel(ctx_, packing_.has_value());
  ZEROD_ASSIGN_OR_RETURN(Buffer host,
                         ctx_.device.allocate(std::max<int64_t>(step, 1) * 4, Category::kWorkspace, Tier::kHost));
  Buffer layer;
  if (packing_) {
    ZEROD_ASSIGN_OR_RETURN(layer, ctx_.device.allocate(packing_->layer_bytes(), Category::kWorkspace, Tier::kHost));
  }
  for (const ShardSegment& s : ctx_.owned) {
    const int u = s.unit;
    const int64_t in_unit = s.flat_offset - p.unit_begin(u);  // where the segment starts in its unit
    if (packing_ && u != 0 && u != L.final_unit()) {
      // A layer is packed whole; the rank keeps its chunk of the bytes.
      ZEROD_RETURN_IF_ERROR(init(L.unit_begin(u), L.unit_begin(u) + L.unit_numel(u), host.host<float>()));
      packing_->pack(host.host<float>(), layer.host<uint8_t>());
      ZEROD_RETURN_IF_ERROR(params_->write(s, 0, layer.host<float>() + in_unit, s.numel));
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

}  // namespace zerod
