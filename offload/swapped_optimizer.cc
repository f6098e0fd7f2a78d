#include "offload/swapped_optimizer.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

// The part of `p` from element `start` on, `numel` long.
ParamPiece cut(const ParamPiece& p, int64_t start, int64_t numel, DType param16_type) {
  ParamPiece q = p;
  if (q.master) q.master += start;
  if (q.grad) q.grad += start;
  if (q.param16) q.param16 = static_cast<char*>(q.param16) + start * dtype_size(param16_type);
  q.numel = numel;
  return q;
}

int64_t numel_of(const std::vector<ParamPiece>& pieces) {
  int64_t n = 0;
  for (const ParamPiece& p : pieces) n += p.numel;
  return n;
}

}  // namespace

std::vector<SwappedOptimizer::SubGroup> SwappedOptimizer::plan_groups(const OptimizerConfig& cfg,
                                                                      const std::vector<ParamPiece>& pieces,
                                                                      DType param16_type, bool swap_master,
                                                                      int64_t sub_group_size,
                                                                      const std::vector<int>& group_starts) {
  const int64_t cap = std::max(sub_group_size, kQuantBlock);
  std::vector<SubGroup> groups;
  SubGroup cur;
  int64_t used = 0;
  uint64_t offset = 0;
  auto close = [&] {
    cur.opt = Optimizer::create_unbound(cfg, cur.pieces, param16_type);
    cur.offset = offset;
    cur.bytes = io_align_up((swap_master ? numel_of(cur.pieces) * 4 : 0) + cur.opt->state_bytes());
    offset += cur.bytes;
    groups.push_back(std::move(cur));
    cur = SubGroup{};
    used = 0;
  };
  for (int k = 0; k < static_cast<int>(pieces.size()); ++k) {
    const ParamPiece& p = pieces[k];
    if (!cur.pieces.empty() && std::ranges::binary_search(group_starts, k)) close();
    int64_t done = 0;
    while (done < p.numel) {
      int64_t take = p.numel - done;
      // A piece is cut only at a multiple of the 8-bit block from its start.
      if (take > cap - used) take = (cap - used) / kQuantBlock * kQuantBlock;
      if (take == 0) {
        close();
        continue;
      }
      cur.pieces.push_back(cut(p, done, take, param16_type));
      cur.source.push_back(k);
      cur.start.push_back(done);
      used += take;
      done += take;
      if (used == cap) close();
    }
  }
  if (!cur.pieces.empty()) close();
  return groups;
}

uint64_t SwappedOptimizer::file_bytes(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces,
                                      DType param16_type, bool swap_master, int64_t sub_group_size,
                                      const std::vector<int>& group_starts, bool undoable) {
  SwapSettings s{};
  s.buffer_count = 1;
  s.undoable = undoable;
  return buffers_for(plan_groups(cfg, pieces, param16_type, swap_master, sub_group_size, group_starts), s)[kFile].bytes;
}

std::vector<BufferSpec> SwappedOptimizer::buffers_for(const std::vector<SubGroup>& groups, const SwapSettings& s) {
  // A buffer holds a record, and after it the group's gradients when those are streamed.
  uint64_t largest = 0, records = 0;
  for (const SubGroup& g : groups) {
    largest = std::max(largest, g.bytes + (s.grads_streamed ? numel_of(g.pieces) * 4 : 0));
    records += g.bytes;
  }
  const int count = std::min<int>(s.buffer_count, std::max<int>(1, static_cast<int>(groups.size())));
  return {{"optimizer sub-group buffers", Category::kOffload, largest, count, s.buffer_tier},
          {"optimizer states in the file", Category::kOptimizer, s.undoable ? 2 * records : records, 1, Tier::kNvme}};
}

std::vector<BufferSpec> SwappedOptimizer::buffers(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces,
                                                  DType param16_type, bool swap_master, const SwapSettings& s) {
  return buffers_for(plan_groups(cfg, pieces, param16_type, swap_master, s.sub_group_size, s.group_starts), s);
}

absl::StatusOr<std::unique_ptr<SwappedOptimizer>> SwappedOptimizer::create(const OptimizerConfig& cfg,
                                                                           std::vector<ParamPiece> pieces,
                                                                           DType param16_type, const Fill& init_master,
                                                                           const SwapSettings& s, Device& host,
                                                                           Kernels& kernels) {
  const bool swap_master = static_cast<bool>(init_master);
  if (s.buffer_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("buffer_count must be at least 1, got ", s.buffer_count));
  }
  std::unique_ptr<SwappedOptimizer> o(new SwappedOptimizer());
  o->swap_master_ = swap_master;
  o->acct_ = s.accountant;
  o->host_ = &host;
  o->kernels_ = &kernels;
  o->whole_ = Optimizer::create_unbound(cfg, pieces, param16_type);
  o->groups_ = plan_groups(cfg, pieces, param16_type, swap_master, s.sub_group_size, s.group_starts);
  o->group_starts_ = s.group_starts;
  o->first_group_.assign(pieces.size() + 1, o->num_sub_groups());
  for (int g = o->num_sub_groups() - 1; g >= 0; --g) o->first_group_[o->groups_[g].source[0]] = g;
  for (const SubGroup& g : o->groups_) o->records_bytes_ += g.bytes;
  o->undoable_ = s.undoable;
  o->placed_second_.assign(o->groups_.size(), false);
  o->spare_written_.assign(o->groups_.size(), false);
  const std::vector<BufferSpec> specs = buffers_for(o->groups_, s);
  const BufferSpec& slots = specs[kGroupBuffers];
  for (int i = 0; i < slots.count; ++i) {
    ZEROD_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate(slots.bytes, slots.category, *slots.tier, *s.accountant));
    o->slots_.emplace_back().buf = std::move(b);
  }
  o->file_bytes_ = specs[kFile].bytes;
  ZEROD_ASSIGN_OR_RETURN(o->io_, AioEngine::create(s.aio, s.hook));
  ZEROD_ASSIGN_OR_RETURN(o->file_, o->io_->create_scratch(s.file, o->file_bytes_));
  ZEROD_RETURN_IF_ERROR(s.accountant->reserve(Tier::kNvme, specs[kFile].category, o->file_bytes_));
  o->nvme_reserved_ = o->file_bytes_;

  // Each group's masters (when swapped) and states live in its buffer, and
  // its gradients (when streamed) after them.
  for (int g = 0; g < o->num_sub_groups(); ++g) {
    SubGroup& sg = o->groups_[g];
    float* m = reinterpret_cast<float*>(o->buffer_of(g));
    float* grad = reinterpret_cast<float*>(o->buffer_of(g) + sg.bytes);
    for (ParamPiece& p : sg.pieces) {
      if (swap_master) p.master = std::exchange(m, m + p.numel);
      if (s.grads_streamed) p.grad = std::exchange(grad, grad + p.numel);
    }
    if (swap_master || s.grads_streamed) sg.opt = Optimizer::create_unbound(cfg, sg.pieces, param16_type);
    sg.opt->bind(m);
  }
  // The first records: the initial masters and zero states.
  ZEROD_RETURN_IF_ERROR(o->stream(false, true, [&](int g) {
    SubGroup& sg = o->groups_[g];
    if (swap_master) {
      for (size_t i = 0; i < sg.pieces.size(); ++i) {
        ZEROD_RETURN_IF_ERROR(init_master(sg.source[i], sg.start[i], sg.pieces[i].numel, sg.pieces[i].master));
      }
    }
    sg.opt->zero_states(host, host.compute_stream());
    return host.synchronize(host.compute_stream());  // before the write-back
  }));
  return o;
}

SwappedOptimizer::~SwappedOptimizer() {
  io_.reset();  // finishes every transfer before the buffers go
  if (acct_) acct_->release(Tier::kNvme, Category::kOptimizer, nvme_reserved_);
}

absl::Status SwappedOptimizer::finish(Slot& s) {
  if (!s.io) return absl::OkStatus();
  absl::Status st = io_->wait(std::exchange(s.io, nullptr));
  if (!st.ok()) s.group = -1;
  return st;
}

absl::Status SwappedOptimizer::claim(int g, bool read) {
  Slot& s = slot_of(g);
  if (s.group == g && (read || !s.io)) return absl::OkStatus();
  // io_uring does not order transfers: what used the buffer ends first.
  absl::Status st = finish(s);
  s.group = g;
  if (read) s.io = io_->read(file_, record_offset(g, false), s.buf.data(), groups_[g].bytes);
  return st;
}

absl::Status SwappedOptimizer::ready(int g, bool read) {
  ZEROD_RETURN_IF_ERROR(claim(g, read));
  return finish(slot_of(g));
}

absl::Status SwappedOptimizer::read_ahead(int h, int g) {
  return &slot_of(h) == &slot_of(g) ? absl::OkStatus() : claim(h, true);
}

uint64_t SwappedOptimizer::record_offset(int g, bool spare) const {
  return groups_[g].offset + (placed_second_[g] != spare ? records_bytes_ : 0);
}

void SwappedOptimizer::write_back(int g, bool spare) {
  Slot& s = slot_of(g);
  s.io = io_->write(file_, record_offset(g, spare), s.buf.data(), groups_[g].bytes);
}

absl::Status SwappedOptimizer::settle() {
  absl::Status first;
  for (Slot& s : slots_) {
    first.Update(finish(s));
    s.group = -1;
  }
  return first;
}

absl::Status SwappedOptimizer::visit(const std::vector<int>& groups, bool read, bool write_back,
                                     const std::function<absl::Status(int)>& fn) {
  absl::Status status;
  for (size_t i = 0; i < groups.size() && status.ok(); ++i) {
    const int g = groups[i];
    status.Update(ready(g, read));
    if (read && i + 1 < groups.size()) status.Update(read_ahead(groups[i + 1], g));
    if (status.ok()) status.Update(fn(g));
    if (status.ok() && write_back) this->write_back(g);
  }
  // Nothing may stay in flight into buffers that the next visit reuses.
  status.Update(settle());
  return status;
}

absl::Status SwappedOptimizer::stream(bool read, bool write_back, const std::function<absl::Status(int)>& fn) {
  std::vector<int> all(num_sub_groups());
  std::iota(all.begin(), all.end(), 0);
  return visit(all, read, write_back, fn);
}

absl::Status SwappedOptimizer::update(int g, float lr, int64_t step, float grad_scale, const Fill& grads,
                                      const MasterOut& updated) {
  SubGroup& sg = groups_[g];
  if (grads) {
    for (size_t i = 0; i < sg.pieces.size(); ++i) {
      ZEROD_RETURN_IF_ERROR(
          grads(sg.source[i], sg.start[i], sg.pieces[i].numel, const_cast<float*>(sg.pieces[i].grad)));
    }
  }
  Stream& stream = host_->compute_stream();
  sg.opt->step(*kernels_, stream, lr, step, grad_scale);
  // The buffer is read by `updated` and written back once this returns.
  ZEROD_RETURN_IF_ERROR(host_->synchronize(stream));
  return updated ? masters_out(g, updated) : absl::OkStatus();
}

absl::Status SwappedOptimizer::step(float lr, int64_t step, float grad_scale, const Fill& grads,
                                    const MasterOut& updated) {
  return stream(true, true, [&](int g) { return update(g, lr, step, grad_scale, grads, updated); });
}

absl::Status SwappedOptimizer::step_pieces(float lr, int64_t step, float grad_scale, int first, int last,
                                           const Fill& grads, const MasterOut& updated, bool undoable) {
  if (undoable) ZEROD_RETURN_IF_ERROR(allow_undo());
  const int begin = first_group_[first], end = first_group_[last];
  auto starts_group = [&](int k, int g) {
    return g == num_sub_groups() || (groups_[g].source[0] == k && groups_[g].start[0] == 0);
  };
  if (first > last || !starts_group(first, begin) || !starts_group(last, end)) {
    return absl::InvalidArgumentError(absl::StrCat("pieces [", first, ", ", last, ") are not whole sub-groups"));
  }
  // Backward completes the units from the last down: the one before this
  // is read next.
  const auto before = std::ranges::lower_bound(group_starts_, first);
  const int ahead = before == group_starts_.begin() ? -1 : first_group_[*std::prev(before)];
  for (int g = begin; g < end; ++g) {
    ZEROD_RETURN_IF_ERROR(ready(g, true));
    const int next = g + 1 < end ? g + 1 : ahead;
    if (next >= 0) ZEROD_RETURN_IF_ERROR(read_ahead(next, g));
    ZEROD_RETURN_IF_ERROR(update(g, lr, step, grad_scale, grads, updated));
    write_back(g, undoable);
    spare_written_[g] = undoable;
  }
  return absl::OkStatus();
}

absl::Status SwappedOptimizer::allow_undo() const {
  if (!undoable_) return absl::FailedPreconditionError("the optimizer's file has no second place for its records");
  if (!swap_master_) {
    return absl::FailedPreconditionError("undoable updates need the masters in the file, not updated in place");
  }
  return absl::OkStatus();
}

absl::Status SwappedOptimizer::commit() {
  // A record's place changes only once its write is done.
  ZEROD_RETURN_IF_ERROR(settle());
  for (int g = 0; g < num_sub_groups(); ++g) {
    if (spare_written_[g]) placed_second_[g] = !placed_second_[g];
  }
  std::fill(spare_written_.begin(), spare_written_.end(), false);
  return absl::OkStatus();
}

absl::Status SwappedOptimizer::undo(const MasterOut& restored) {
  // The buffers may hold updated records: settle() forgets what they hold.
  absl::Status status = settle();
  std::vector<int> kept;
  for (int g = 0; g < num_sub_groups(); ++g) {
    if (spare_written_[g]) kept.push_back(g);
  }
  std::fill(spare_written_.begin(), spare_written_.end(), false);
  if (!status.ok() || !restored) return status;
  return visit(kept, true, false, [&](int g) { return masters_out(g, restored); });
}

absl::Status SwappedOptimizer::masters_out(int g, const MasterOut& out) {
  const SubGroup& sg = groups_[g];
  for (size_t i = 0; i < sg.pieces.size(); ++i) {
    ZEROD_RETURN_IF_ERROR(out(sg.source[i], sg.start[i], sg.pieces[i].numel, sg.pieces[i].master));
  }
  return absl::OkStatus();
}

absl::Status SwappedOptimizer::read_masters(const MasterOut& out) {
  auto copy_out = [&](int g) { return masters_out(g, out); };
  if (!swap_master_) {
    for (int g = 0; g < num_sub_groups(); ++g) ZEROD_RETURN_IF_ERROR(copy_out(g));
    return absl::OkStatus();
  }
  return stream(true, false, copy_out);
}

absl::Status SwappedOptimizer::write_masters(const std::vector<const float*>& src) {
  auto copy_in = [&](int g) {
    SubGroup& sg = groups_[g];
    for (size_t i = 0; i < sg.pieces.size(); ++i) {
      std::memcpy(sg.pieces[i].master, src[sg.source[i]] + sg.start[i], sg.pieces[i].numel * sizeof(float));
    }
    return absl::OkStatus();
  };
  if (!swap_master_) {
    for (int g = 0; g < num_sub_groups(); ++g) ZEROD_RETURN_IF_ERROR(copy_in(g));
    return absl::OkStatus();
  }
  return stream(true, true, copy_in);
}

absl::Status SwappedOptimizer::each_part(const std::string& name, bool write_back,
                                         const std::function<absl::Status(void*, uint64_t, uint64_t)>& fn) {
  uint64_t offset = 0;
  return stream(true, write_back, [&](int g) {
    for (const StateArray& a : groups_[g].opt->state_arrays()) {
      if (a.name != name) continue;
      const uint64_t bytes = a.numel * dtype_size(a.dtype);
      ZEROD_RETURN_IF_ERROR(fn(a.data, offset, bytes));
      offset += bytes;
    }
    return absl::OkStatus();
  });
}

absl::Status SwappedOptimizer::read_state(const std::string& name,
                                          const std::function<absl::Status(const void*, size_t)>& out) {
  return each_part(name, false, [&](void* data, uint64_t, uint64_t bytes) { return out(data, bytes); });
}

absl::Status SwappedOptimizer::write_state(const std::string& name,
                                           const std::function<absl::Status(void*, uint64_t, uint64_t)>& in) {
  return each_part(name, true, in);
}

}  // namespace zerod
