#include "shard/zero_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "offload/swap_dir.h"
#include "runtime/kernels/cpu_table.h"

namespace zerod {
namespace {

// The owned segments that begin a unit (segments come in unit order).
std::vector<int> unit_starts(const std::vector<ShardSegment>& owned) {
  std::vector<int> starts;
  for (size_t k = 0; k < owned.size(); ++k) {
    if (k == 0 || owned[k].unit != owned[k - 1].unit) starts.push_back(static_cast<int>(k));
  }
  return starts;
}

// enqueue_step's sum of squares and factor on the device.
constexpr uint64_t kStreamStepBytes = 16;

}  // namespace

ZeroEngine::ZeroEngine(const GptLayout& layout, const ZeroSettings& settings, Communicator& comm, Device& device,
                       Kernels& kernels)
    : settings_(settings),
      host_(device.accountant()),
      host_kernels_(cpu_kernels()),
      ctx_(layout, settings.zero.stage, settings.precision, comm, device, kernels, host_, *host_kernels_) {}

ZeroEngine::~ZeroEngine() {
  ctx_.device.synchronize(ctx_.stream).IgnoreError();
  // Adds still in flight may run the update, which needs the other stores;
  // what they give the GPU reads the host sums, which go with the store.
  if (device_steps_) grads_->reduce().IgnoreError();
  device_steps_.reset();
  grads_.reset();
}

absl::StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::create(const GptLayout& layout, const ZeroSettings& settings,
                                                               Communicator& comm, Device& device, Kernels& kernels) {
  std::unique_ptr<ZeroEngine> e(new ZeroEngine(layout, settings, comm, device, kernels));
  ZEROD_RETURN_IF_ERROR(e->build());
  return e;
}

absl::Status ZeroEngine::build() {
  ZEROD_RETURN_IF_ERROR(create_stores());
  // The stores zero their device buffers on the compute stream
  // (ZeroContext::alloc); the initial values written next must land after.
  ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
  const std::vector<BufferSpec> own =
      own_buffers(ctx_, settings_, stores_, ctx_.comm.world_size(), plan_device(ctx_.device));
  ZEROD_ASSIGN_OR_RETURN(unit_sums_, allocate_spec(own[kUnitSums].tier ? ctx_.host : ctx_.device, own[kUnitSums]));
  ZEROD_ASSIGN_OR_RETURN(unit_sums_host_, allocate_spec(ctx_.device, own[kUnitSumsOnHost]));
  summed_.assign(ctx_.part.num_units(), false);
  on_stream_ = own[kStreamStep].count > 0;
  if (on_stream_) {
    ZEROD_ASSIGN_OR_RETURN(stream_step_, allocate_spec(ctx_.device, own[kStreamStep]));
  }
  ZEROD_RETURN_IF_ERROR(create_optimizer());
  settings_.init = nullptr;  // an imported file is closed
  if (stores_.undoable) ZEROD_RETURN_IF_ERROR(optimizer_->allow_undo());
  return publish_params();
}

StoreChoice choose_stores(const ZeroSettings& settings, const PlanDevice& device) {
  const ZeroConfig& z = settings.zero;
  const OffloadConfig& off = z.offload_optimizer;
  StoreChoice c;
  c.undoable = settings.factor_after_backward && off.super_offload;
  c.params_offloaded = z.stage == 3 && z.offload_param.device != OffloadDevice::kNone;
  c.params_in_file = c.params_offloaded && z.offload_param.device == OffloadDevice::kNvme;
  c.states_in_file = off.device == OffloadDevice::kNvme;
  c.grads_in_file = z.stage >= 2 && c.states_in_file;
  c.optimizer_on_host = off.device != OffloadDevice::kNone;
  // Masters streamed from a file by updates that may be undone live in the
  // file too: the record they were read from is what an undo keeps.
  c.separate_masters = settings.precision != DType::kF32 || c.params_offloaded ||
                       (c.optimizer_on_host && !device.host_visible()) || (c.undoable && c.states_in_file);
  // At stages 2 and 3 an offloaded optimizer's gradients are added on the
  // host thread of their store (host_grads, file_grads), which can update
  // each unit as it is complete.
  c.during_backward = z.stage >= 2 && c.optimizer_on_host && (c.undoable || !settings.factor_after_backward);
  c.staging = offload_buffer_tier(off, device);
  c.sums.count = settings.micro_batches;
  if (z.stage >= 2) {
    // "auto" is resolved before (Trainer); unresolved it is fp32. A device
    // whose memory is the host's has no link to spare: its micro-batches
    // go to the host each.
    const bool compute = z.micro_batch_grads == MicroBatchGrads::kCompute;
    if (compute) c.sums.rounded = settings.precision;
    if (c.optimizer_on_host && settings.micro_batches > 1 && device.memory == Tier::kGpu) {
      c.sums.device_bytes = compute ? z.compute_sums_on_device_bytes : MicroBatchSums::kAll;
      // Held in host memory, not a file's window.
      if (compute && !c.grads_in_file) c.sums.fold = std::clamp(z.compute_host_fold, 1, settings.micro_batches);
    }
  }
  // The kernels write a 16-bit working copy, in the GPU's memory or copied
  // to host memory; the states stay where a checkpoint reads them. What the
  // link copies is to be pinned (pin_memory): a copy to plain memory would
  // hold the thread that enqueues it until the GPU got there.
  c.updates_on_device = c.during_backward && !c.undoable && !c.states_in_file && !c.params_in_file &&
                        device.memory == Tier::kGpu && settings.precision != DType::kF32 && off.pin_memory &&
                        (!c.params_offloaded || z.offload_param.pin_memory);
  return c;
}

std::optional<Tier> optimizer_memory(const StoreChoice& c) {
  if (!c.optimizer_on_host) return std::nullopt;
  // Copied to and from the device: offload's buffers' (pinned where they are).
  return c.updates_on_device ? c.staging : Tier::kHost;
}

bool steps_on_stream(const ZeroSettings& settings, const StoreChoice& c, int world_size) {
  return world_size == 1 && settings.zero.stage == 0 && !c.optimizer_on_host;
}

ShardStoreSettings ZeroEngine::store_settings(const ZeroSettings& settings, const OffloadConfig& off, Category c,
                                              const std::string& file, const PlanDevice& device,
                                              MemoryAccountant* accountant) {
  return {off.device,         c,         file, off.buffer_count, offload_buffer_tier(off, device), settings.aio,
          settings.io_faults, accountant};
}

SwapSettings ZeroEngine::swap_settings(const ZeroSettings& settings, const StoreChoice& c, const ZeroShape& shape,
                                       bool grads_streamed, const std::string& file, MemoryAccountant* accountant) {
  return {file,
          settings.zero.sub_group_size,
          settings.zero.offload_optimizer.buffer_count,
          c.staging,
          settings.aio,
          settings.io_faults,
          grads_streamed,
          unit_starts(shape.owned),
          c.undoable,
          accountant};
}

ParamStoreChoice ZeroEngine::param_store(const ZeroSettings& settings, const StoreChoice& c, const PlanDevice& device,
                                         int rank, MemoryAccountant* accountant) {
  const ZeroConfig& z = settings.zero;
  ParamStoreChoice p;
  p.staging = c.staging;
  p.written_from_host = c.separate_masters;
  if (z.stage < 3) return p;
  if (!c.params_offloaded) {
    p.kind = ParamStoreChoice::kSharded;
    return p;
  }
  p.kind = ParamStoreChoice::kOffloaded;
  const std::string file = c.params_in_file ? swap_file_path(*z.offload_param.nvme_path, "params", rank) : "";
  p.offload = store_settings(settings, z.offload_param, Category::kParams, file, device, accountant);
  p.written_during_backward = c.during_backward;
  return p;
}

GradStoreChoice ZeroEngine::grad_store(const ZeroSettings& settings, const StoreChoice& c, const PlanDevice& device,
                                       int rank, MemoryAccountant* accountant) {
  const ZeroConfig& z = settings.zero;
  GradStoreChoice g;
  g.sums = c.sums;
  if (z.stage <= 1) {
    g.scatter = z.stage == 1;
    if (c.optimizer_on_host) g.host_tier = c.staging;
  } else if (c.grads_in_file) {
    g.kind = GradStoreChoice::kFile;
    g.file = store_settings(settings, z.offload_optimizer, Category::kGrads,
                            swap_file_path(*z.offload_optimizer.nvme_path, "grads", rank), device, accountant);
  } else if (c.optimizer_on_host) {
    g.kind = GradStoreChoice::kHost;
    g.tier = c.staging;
  } else {
    g.kind = GradStoreChoice::kSharded;
  }
  return g;
}

std::vector<BufferSpec> ZeroEngine::own_buffers(const ZeroShape& shape, const ZeroSettings& settings,
                                                const StoreChoice& c, int world_size, const PlanDevice& device) {
  const uint64_t sums = shape.part.num_units() * 8;
  return {{"gradient sums by unit", Category::kWorkspace, sums, 1,
           c.optimizer_on_host ? std::optional(Tier::kHost) : std::nullopt},
          {"gradient sums by unit, on the host", Category::kWorkspace, sums, 1, device.staging_tier()},
          {"update factor", Category::kWorkspace, kStreamStepBytes, zerod::steps_on_stream(settings, c, world_size)},
          {"gradient sums by unit, of those updated on the device", Category::kWorkspace, sums,
           c.updates_on_device ? 1 : 0}};
}

void ZeroEngine::plan(const GptLayout& layout, const ZeroSettings& settings, int world_size, int rank,
                      bool saves_checkpoints, MemoryPlan& plan) {
  const ZeroConfig& z = settings.zero;
  ZeroShape shape(layout, z.stage, world_size, rank, settings.precision);
  shape.operands = settings.operands;
  const PlanDevice& device = plan.device();
  const StoreChoice c = choose_stores(settings, device);
  plan.add(param_store_buffers(shape, z, param_store(settings, c, device, rank, nullptr), device));
  plan.add(grad_store_buffers(shape, z, grad_store(settings, c, device, rank, nullptr)));
  plan.add(own_buffers(shape, settings, c, world_size, device));
  if (c.states_in_file) {
    plan_streamed_optimizer(shape, settings.optimizer, c.separate_masters,
                            swap_settings(settings, c, shape, /*grads_streamed=*/c.grads_in_file, "", nullptr), plan);
  } else {
    plan_in_memory_optimizer(shape, optimizer_memory(c), settings.optimizer, c.separate_masters, c.undoable,
                             saves_checkpoints, plan);
  }
  if (c.updates_on_device) plan.add(DeviceSteps::buffers(shape, c.sums.device_units(shape.part), c.params_offloaded));
}

absl::Status ZeroEngine::create_stores() {
  const ZeroConfig& z = settings_.zero;
  const OffloadConfig& off = z.offload_optimizer;
  const PlanDevice device = plan_device(ctx_.device);
  stores_ = choose_stores(settings_, device);
  const StoreChoice& c = stores_;

  // The disks are checked before anything is allocated.
  const std::vector<int64_t>& chunks = ctx_.part.chunks();
  std::vector<SwapFile> files;
  const std::string states_key = "zero_optimization.offload_optimizer.nvme_path";
  if (c.states_in_file) {
    files.push_back(
        {*off.nvme_path,
         SwappedOptimizer::file_bytes(settings_.optimizer, piece_shapes(ctx_.owned), ctx_.dtype, c.separate_masters,
                                      z.sub_group_size, unit_starts(ctx_.owned), c.undoable),
         states_key});
  }
  if (c.grads_in_file) files.push_back({*off.nvme_path, ShardStore::file_bytes(chunks, DType::kF32), states_key});
  if (c.params_in_file) {
    files.push_back({*z.offload_param.nvme_path, ShardStore::file_bytes(chunks, ctx_.dtype),
                     "zero_optimization.offload_param.nvme_path"});
  }
  ZEROD_RETURN_IF_ERROR(check_swap_dirs(files));

  const int rank = ctx_.comm.rank();
  MemoryAccountant* accountant = &ctx_.device.accountant();
  ZEROD_ASSIGN_OR_RETURN(params_, create_param_store(ctx_, z, param_store(settings_, c, device, rank, accountant)));
  ZEROD_ASSIGN_OR_RETURN(grads_, create_grad_store(ctx_, z, grad_store(settings_, c, device, rank, accountant)));
  return absl::OkStatus();
}

absl::Status ZeroEngine::create_optimizer() {
  const std::vector<ShardSegment>& owned = ctx_.owned;
  // An optimizer on the device writes the working copy of what it updates
  // where that is in memory; masters that are not separate are the fp32
  // parameters.
  std::vector<ParamPiece> pieces = piece_shapes(owned);
  unit_pieces_.assign(ctx_.part.num_units(), {0, 0});
  for (size_t k = 0; k < owned.size(); ++k) {
    auto& [first, last] = unit_pieces_[owned[k].unit];  // segments come in unit order
    if (first == last) first = static_cast<int>(k);
    last = static_cast<int>(k) + 1;
    pieces[k].grad = grads_->owned(owned[k]);
    void* working = params_->working(owned[k]);
    if (!stores_.separate_masters) {
      pieces[k].master = static_cast<float*>(working);
    } else if (!stores_.optimizer_on_host) {
      pieces[k].param16 = working;
    }
  }
  const OptimizerState::PieceFill init = [&](int k, int64_t start, int64_t n, float* dst) {
    const ShardSegment& s = owned[k];
    ZEROD_RETURN_IF_ERROR(settings_.init(s.flat_offset + start, s.flat_offset + start + n, dst));
    return stores_.separate_masters ? params_->write(s, start, dst, n) : absl::OkStatus();
  };
  const OffloadConfig& off = settings_.zero.offload_optimizer;
  if (off.device == OffloadDevice::kNvme) {
    const SwapSettings ss =
        swap_settings(settings_, stores_, ctx_, /*grads_streamed=*/!grads_->in_memory(),
                      swap_file_path(*off.nvme_path, "optimizer", ctx_.comm.rank()), &ctx_.device.accountant());
    ZEROD_ASSIGN_OR_RETURN(optimizer_, streamed_optimizer(ctx_, settings_.optimizer, std::move(pieces),
                                                          stores_.separate_masters, init, ss));
  } else {
    const OptimizerPlace place = stores_.optimizer_on_host
                                     ? OptimizerPlace{ctx_.host, ctx_.host_kernels, optimizer_memory(stores_)}
                                     : OptimizerPlace{ctx_.device, ctx_.kernels};
    ZEROD_ASSIGN_OR_RETURN(optimizer_, in_memory_optimizer(ctx_, place, settings_.optimizer, std::move(pieces),
                                                           stores_.separate_masters, init));
  }
  if (stores_.updates_on_device) {
    ZEROD_ASSIGN_OR_RETURN(device_steps_,
                           DeviceSteps::create(ctx_, *optimizer_->bound(), unit_pieces_,
                                               stores_.sums.device_units(ctx_.part), stores_.params_offloaded));
    const std::vector<BufferSpec> own =
        own_buffers(ctx_, settings_, stores_, ctx_.comm.world_size(), plan_device(ctx_.device));
    ZEROD_RETURN_IF_ERROR(ctx_.alloc(device_unit_sums_, own[kDeviceUnitSums]));
    for (const ShardSegment& s : owned) {
      working_.push_back(stores_.params_offloaded ? params_->working_on_host(s) : params_->working(s));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::reduce_gradients() {
  // The collectives read what backward wrote; the optimizer reads the
  // result on the host.
  absl::Status s = ctx_.device.synchronize(ctx_.stream);
  s.Update(grads_->reduce());
  s.Update(ctx_.device.synchronize(ctx_.stream));
  return s;
}

absl::Status ZeroEngine::enqueue_unit_sums(Device& d, Kernels& k) {
  // Unit by unit, so that gradients in a file give the same sum as in
  // memory; by the kernels of where they are. In memory, every unit's
  // chunk is at hand, and a table may take them in a few launches; from a
  // file, a unit's window at a time.
  const int units = ctx_.part.num_units();
  double* sums = unit_sums_.ptr<double>();
  std::vector<SquaresOf> at_hand;
  std::vector<int> held;
  for (int u = 0; u < units; ++u) {
    if (summed_[u]) continue;
    ZEROD_ASSIGN_OR_RETURN(const float* g, grads_->acquire(u));
    const SquaresOf t{g, ctx_.part.chunk(u), sums + u};
    if (grads_->in_memory()) {
      at_hand.push_back(t);
      held.push_back(u);
      continue;
    }
    k.sum_squares(d.compute_stream(), t.x, t.n, t.out);
    ZEROD_RETURN_IF_ERROR(grads_->release(u));
  }
  k.sum_squares_tensors(d.compute_stream(), at_hand);
  for (int u : held) ZEROD_RETURN_IF_ERROR(grads_->release(u));
  return absl::OkStatus();
}

absl::StatusOr<double> ZeroEngine::grad_sum_squares() {
  const int units = ctx_.part.num_units();
  const bool on_host = grads_->on_host();
  Device& d = on_host ? ctx_.host : ctx_.device;
  if (!summed_on_device_.empty()) {
    // Those sums join the others' on the host.
    ctx_.device.copy(ctx_.stream, unit_sums_host_.data(), device_unit_sums_.data(), units * 8);
    ZEROD_RETURN_IF_ERROR(ctx_.device.synchronize(ctx_.stream));
    for (int u : summed_on_device_) unit_sums_.ptr<double>()[u] = unit_sums_host_.host<double>()[u];
  }
  ZEROD_RETURN_IF_ERROR(enqueue_unit_sums(d, on_host ? ctx_.host_kernels : ctx_.kernels));
  d.copy(d.compute_stream(), unit_sums_host_.data(), unit_sums_.data(), units * 8);
  ZEROD_RETURN_IF_ERROR(d.synchronize(d.compute_stream()));
  double sumsq = 0;
  for (int u = 0; u < units; ++u) sumsq += unit_sums_host_.host<double>()[u];
  // Where every rank holds all the (reduced) gradients, its sum is the total.
  if (shard_count() > 1) ZEROD_RETURN_IF_ERROR(all_reduce(ctx_.comm, &sumsq, 1, CommType::kF64, ReduceOp::kSum));
  return sumsq;
}

OptimizerState::MasterOut ZeroEngine::working_copy_writer() {
  // A working copy that an optimizer on the device keeps in memory is
  // written by the optimizer itself; otherwise it is set from the new
  // masters.
  if (!stores_.separate_masters || (!stores_.optimizer_on_host && params_->in_memory())) return {};
  return [this](int k, int64_t start, int64_t n, const float* master) {
    return params_->write(ctx_.owned[k], start, master, n);
  };
}

int ZeroEngine::units_shared_with_device() const {
  if (!device_steps_) return 0;
  int n = 0;
  for (int u = stores_.sums.device_units(ctx_.part); u < ctx_.part.num_units(); ++u) n += device_steps_->takes(u);
  return n;
}

void ZeroEngine::zero_grads() {
  grads_->zero();
  summed_.assign(ctx_.part.num_units(), false);
  summed_on_device_.clear();
}

void ZeroEngine::update_during_backward(float lr, int64_t step, int micro_batches, float grad_factor) {
  updating_during_backward_ = true;
  factor_during_backward_ = grad_factor;
  grads_->after_adds(
      micro_batches,
      [this, lr, step, grad_factor, write = working_copy_writer()](int u, const float* g) {
        ++units_updated_in_backward_;
        // The unit's part of the norm, while its gradients are at hand (they
        // may be in a file later); the same kernel on the same values.
        Stream& host = ctx_.host.compute_stream();
        ctx_.host_kernels.sum_squares(host, g, ctx_.part.chunk(u), unit_sums_.ptr<double>() + u);
        ZEROD_RETURN_IF_ERROR(ctx_.host.synchronize(host));
        summed_[u] = true;
        if (device_steps_ && device_steps_->takes(u)) {
          ++units_updated_on_device_;
          device_steps_->enqueue(unit_pieces_[u].first, unit_pieces_[u].second, g, /*grads_on_host=*/true, working_, lr,
                                 step, grad_factor);
          return absl::OkStatus();
        }
        const int64_t unit_at = ctx_.part.shard_offset(u);
        const OptimizerState::PieceFill grads = [&](int k, int64_t start, int64_t n, float* dst) {
          std::memcpy(dst, g + (ctx_.owned[k].shard_offset - unit_at) + start, n * sizeof(float));
          return absl::OkStatus();
        };
        return optimizer_->step_pieces(lr, step, grad_factor, unit_pieces_[u].first, unit_pieces_[u].second, grads,
                                       write, stores_.undoable);
      },
      /*keep=*/stores_.undoable);  // an update undone is done again from them
  if (!device_steps_) return;
  grads_->after_device_adds([this, lr, step, grad_factor](int u, const float* sum) {
    ++units_updated_in_backward_;
    ++units_updated_on_device_;
    // The same kernel on the same values as the host's, on the device.
    ctx_.kernels.sum_squares(ctx_.stream, sum, ctx_.part.chunk(u), device_unit_sums_.ptr<double>() + u);
    summed_[u] = true;
    summed_on_device_.push_back(u);
    device_steps_->enqueue(unit_pieces_[u].first, unit_pieces_[u].second, sum, /*grads_on_host=*/false, working_, lr,
                           step, grad_factor);
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> ZeroEngine::end_update_during_backward(float grad_factor, bool restore_working) {
  if (!updating_during_backward_) return false;
  // Done unit by unit as the gradients were reduced (reduce_gradients
  // waited for the last).
  updating_during_backward_ = false;
  grads_->after_adds(0, {}, false);
  if (device_steps_) {
    grads_->after_device_adds({});
    ZEROD_RETURN_IF_ERROR(device_steps_->finish());
  }
  if (grad_factor == factor_during_backward_) {
    ZEROD_RETURN_IF_ERROR(optimizer_->commit());
    return true;
  }
  if (!stores_.undoable) return absl::InternalError("the update begun during backward cannot be undone");
  ++updates_undone_;
  ZEROD_RETURN_IF_ERROR(optimizer_->undo(restore_working ? working_copy_writer() : OptimizerState::MasterOut{}));
  return false;
}

absl::Status ZeroEngine::apply_optimizer(float lr, int64_t step, float grad_factor) {
  const std::vector<ShardSegment>& owned = ctx_.owned;
  // An undone update is done again in full, which writes the working copy.
  absl::StatusOr<bool> done = end_update_during_backward(grad_factor, /*restore_working=*/false);
  absl::Status stepped = done.status();
  if (done.ok() && !*done) {
    stepped = optimizer_->step(
        lr, step, grad_factor,
        [&](int k, int64_t start, int64_t n, float* dst) { return grads_->read(owned[k], start, n, dst); },
        working_copy_writer());
  }
  stepped.Update(grads_->drop());
  ZEROD_RETURN_IF_ERROR(stepped);
  return publish_params();
}

absl::Status ZeroEngine::enqueue_step(float lr, int64_t step, double loss_scale, double clip) {
  if (!on_stream_) return absl::FailedPreconditionError("this rank's step needs the host (steps_on_stream)");
  // A world of one at stage 0: the gradients are the reduced ones, every
  // unit's in the device's memory.
  ZEROD_RETURN_IF_ERROR(enqueue_unit_sums(ctx_.device, ctx_.kernels));
  Stream& s = ctx_.stream;
  double* sumsq = stream_step_.ptr<double>();
  float* factor = reinterpret_cast<float*>(sumsq + 1);
  ctx_.kernels.update_factor(s, unit_sums_.ptr<double>(), ctx_.part.num_units(), loss_scale, clip, factor, sumsq);
  ctx_.device.copy(s, unit_sums_host_.data(), sumsq, sizeof(double));
  absl::Status stepped = optimizer_->enqueue_step(lr, step, factor);
  stepped.Update(grads_->drop());
  ZEROD_RETURN_IF_ERROR(stepped);
  return publish_params();
}

absl::Status ZeroEngine::skip_optimizer() {
  // No factor is the one the update during backward used; the working copy
  // it wrote is set back and published as it was (every rank skips).
  const bool undo = updating_during_backward_;
  absl::Status s = end_update_during_backward(NAN, /*restore_working=*/true).status();
  s.Update(grads_->drop());
  ZEROD_RETURN_IF_ERROR(s);
  return undo ? publish_params() : absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ZeroEngine::gather_master_params() {
  const Partition& p = ctx_.part;
  // The masters, wherever they are, into a shard-shaped buffer first.
  ZEROD_ASSIGN_OR_RETURN(Buffer shard_buffer,
                         ctx_.device.allocate(p.shard_numel() * 4, Category::kWorkspace, Tier::kHost));
  float* shard = shard_buffer.host<float>();
  ZEROD_RETURN_IF_ERROR(optimizer_->read_masters([&](int k, int64_t start, int64_t n, const float* m) {
    std::memcpy(shard + ctx_.owned[k].shard_offset + start, m, n * sizeof(float));
    return absl::OkStatus();
  }));
  std::vector<float> out(ctx_.layout.num_params());
  const int n = p.world_size();
  for (int u = 0; u < p.num_units(); ++u) {
    const float* src = shard + p.shard_offset(u);
    if (n > 1) {
      ZEROD_ASSIGN_OR_RETURN(Buffer b, ctx_.device.allocate(p.chunk(u) * n * 4, Category::kWorkspace, Tier::kHost));
      ZEROD_RETURN_IF_ERROR(ctx_.comm.all_gather(src, b.data(), p.chunk(u), CommType::kF32)->wait());
      std::memcpy(out.data() + p.unit_begin(u), b.data(), p.unit_numel(u) * 4);
    } else {
      std::memcpy(out.data() + p.unit_begin(u), src, p.unit_numel(u) * 4);
    }
  }
  return out;
}

}  // namespace zerod
