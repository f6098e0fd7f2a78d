#include "shard/frozen_weights.h"

#include <algorithm>

#include "offload/swap_dir.h"
#include "runtime/kernels/cpu/cpu_table.h"

namespace zerod {
namespace {

// The host buffer the initial values pass through: a layer's unit at most.
int64_t fill_numel(const ZeroShape& shape) {
  int64_t n = 0;
  for (const ShardSegment& s : shape.owned) n = std::max(n, s.numel);
  return std::min(n, shape.layout.unit_numel(GptLayout::layer_unit(0)));
}

bool offloaded(const ZeroConfig& z) { return z.stage == 3 && z.offload_param.device != OffloadDevice::kNone; }

ShardStoreSettings frozen_store_settings(const ZeroSettings& s, const std::string& file, const PlanDevice& device,
                                         MemoryAccountant* accountant) {
  const OffloadConfig& off = s.zero.offload_param;
  return {off.device, Category::kFrozen, file, off.buffer_count, offload_buffer_tier(off, device), s.aio,
          s.io_faults, accountant};
}

}  // namespace

FrozenWeights::FrozenWeights(const GptLayout& layout, const ZeroSettings& settings, Communicator& comm,
                             Device& device, Kernels& kernels)
    : host_(device.accountant()),
      host_kernels_(cpu_kernels()),
      ctx_(layout, settings.zero.stage, settings.precision, comm, device, kernels, host_, *host_kernels_,
           Category::kFrozen) {}

FrozenWeights::~FrozenWeights() { ctx_.device.synchronize(ctx_.stream).IgnoreError(); }

void FrozenWeights::plan(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size, int rank,
                         MemoryPlan& into) {
  MemoryPlan plan(into.device());
  plan_build(layout, settings, nf4, world_size, rank, plan);
  into.add_all(plan, Phase::kFrozenWeights);
}

void FrozenWeights::plan_build(const GptLayout& layout, const ZeroSettings& settings, bool nf4, int world_size,
                               int rank, MemoryPlan& plan) {
  if (nf4) {
    Nf4Weights::plan(layout, plan);
    return;
  }
  const ZeroConfig& z = settings.zero;
  const ZeroShape shape(layout, z.stage, world_size, rank, settings.precision, Category::kFrozen);
  const Tier staging = offload_buffer_tier(z.offload_param, plan.device());
  if (z.stage < 3) {
    plan_replicated_params(shape, /*written_from_host=*/true, staging, plan);
  } else if (offloaded(z)) {
    plan_offloaded_params(shape, z, frozen_store_settings(settings, "", plan.device(), nullptr),
                          /*written_during_backward=*/false, plan);
  } else {
    plan_sharded_params(shape, z, /*written_from_host=*/true, staging, plan);
  }
  plan.add("frozen weights, initial values", Tier::kHost, Category::kWorkspace,
           std::max<int64_t>(fill_numel(shape), 1) * 4, Phase::kBuild, /*kept=*/false);
}

absl::StatusOr<std::unique_ptr<FrozenWeights>> FrozenWeights::create(const GptLayout& layout,
                                                                     const ZeroSettings& settings, bool nf4,
                                                                     Communicator& comm, Device& device,
                                                                     Kernels& kernels) {
  std::unique_ptr<FrozenWeights> f(new FrozenWeights(layout, settings, comm, device, kernels));
  if (nf4) {
    ZEROD_ASSIGN_OR_RETURN(Nf4Weights w, Nf4Weights::create(&layout, settings.init, device, kernels));
    f->nf4_.emplace(std::move(w));
    return f;
  }
  const ZeroConfig& z = settings.zero;
  const PlanDevice where = plan_device(device);
  const Tier staging = offload_buffer_tier(z.offload_param, where);
  if (z.stage < 3) {
    ZEROD_ASSIGN_OR_RETURN(f->params_, replicated_params(f->ctx_, staging));
  } else if (offloaded(z)) {
    std::string file;
    if (z.offload_param.device == OffloadDevice::kNvme) {
      ZEROD_RETURN_IF_ERROR(check_swap_dirs({{*z.offload_param.nvme_path,
                                              ShardStore::file_bytes(f->ctx_.part.chunks(), settings.precision),
                                              "zero_optimization.offload_param.nvme_path"}}));
      file = swap_file_path(*z.offload_param.nvme_path, "frozen", comm.rank());
    }
    ZEROD_ASSIGN_OR_RETURN(f->params_, offloaded_params(f->ctx_, z,
                                                        frozen_store_settings(settings, file, where,
                                                                              &device.accountant()),
                                                        /*written_during_backward=*/false));
  } else {
    ZEROD_ASSIGN_OR_RETURN(f->params_, sharded_params(f->ctx_, z, staging));
  }
  ZEROD_RETURN_IF_ERROR(f->fill(settings.init));
  return f;
}

absl::Status FrozenWeights::fill(const ParamInit& init) {
  // The stores zero their buffers on the compute stream; the values land after.
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
  const int64_t step = fill_numel(ctx_);
  ZEROD_ASSIGN_OR_RETURN(Buffer host, ctx_.device.allocate(std::max<int64_t>(step, 1) * 4, Category::kWorkspace,
                                                           Tier::kHost));
  for (const ShardSegment& s : ctx_.owned) {
    for (int64_t start = 0; start < s.numel; start += step) {
      const int64_t n = std::min(step, s.numel - start);
      ZEROD_RETURN_IF_ERROR(init(s.flat_offset + start, s.flat_offset + start + n, host.host<float>()));
      ZEROD_RETURN_IF_ERROR(params_->write(s, start, host.host<float>(), n));
    }
  }
  ZEROD_RETURN_IF_ERROR(params_->publish());
  return ctx_.device.synchronize(ctx_.stream);
}

}  // namespace zerod
