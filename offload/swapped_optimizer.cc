#include "offload/swapped_optimizer.h"

#include <algorithm>
#include <cstring>
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

std::vector<SwappedOptimizer::SubGroup> SwappedOptimizer::plan(const OptimizerConfig& cfg,
                                                               const std::vector<ParamPiece>& pieces,
                                                               DType param16_type, bool swap_master,
                                                               int64_t sub_group_size) {
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
                                      DType param16_type, bool swap_master, int64_t sub_group_size) {
  uint64_t bytes = 0;
  for (const SubGroup& g : plan(cfg, pieces, param16_type, swap_master, sub_group_size)) bytes += g.bytes;
  return bytes;
}

absl::StatusOr<std::unique_ptr<SwappedOptimizer>> SwappedOptimizer::create(const OptimizerConfig& cfg,
                                                                            std::vector<ParamPiece> pieces,
                                                                            DType param16_type,
                                                                            const Fill& init_master,
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
  o->groups_ = plan(cfg, pieces, param16_type, swap_master, s.sub_group_size);
  // A buffer holds a record, and after it the group's gradients when those are streamed.
  uint64_t largest = 0;
  for (const SubGroup& g : o->groups_) {
    largest = std::max(largest, g.bytes + (s.grads_streamed ? numel_of(g.pieces) * 4 : 0));
    o->file_bytes_ += g.bytes;
  }
  const int nbuf = std::min<int>(s.buffer_count, std::max<int>(1, o->groups_.size()));
  for (int i = 0; i < nbuf; ++i) {
    ZEROD_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate(largest, Category::kOffload, s.buffer_tier, *s.accountant));
    o->buffers_.push_back(std::move(b));
  }
  ZEROD_ASSIGN_OR_RETURN(o->io_, AioEngine::create(s.aio, s.hook));
  ZEROD_ASSIGN_OR_RETURN(o->file_, o->io_->create_scratch(s.file, o->file_bytes_));
  ZEROD_RETURN_IF_ERROR(s.accountant->reserve(Tier::kNvme, Category::kOptimizer, o->file_bytes_));
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

absl::Status SwappedOptimizer::stream(bool read, bool write_back, const std::function<absl::Status(int)>& fn) {
  const int G = num_sub_groups(), B = static_cast<int>(buffers_.size());
  std::vector<AioEngine::Ticket> reads(G), writes(G);
  absl::Status status;
  auto issue_read = [&](int g) {
    if (read) reads[g] = io_->read(file_, groups_[g].offset, buffer_of(g), groups_[g].bytes);
  };
  auto wait = [&](AioEngine::Ticket& t) {
    if (t) status.Update(io_->wait(std::exchange(t, nullptr)));
  };
  for (int g = 0; g < G && status.ok(); ++g) {
    if (g >= B) wait(writes[g - B]);  // the last group in this buffer is written back
    if (!reads[g]) issue_read(g);     // unless prefetched
    wait(reads[g]);
    // Prefetch the next group once the write-back that last used its buffer is done.
    if (g + 1 < G && B > 1) {
      if (g + 1 - B >= 0) wait(writes[g + 1 - B]);
      issue_read(g + 1);
    }
    if (!status.ok()) break;
    status.Update(fn(g));
    if (!status.ok()) break;
    if (write_back) writes[g] = io_->write(file_, groups_[g].offset, buffer_of(g), groups_[g].bytes);
  }
  // Nothing may stay in flight into buffers that the next stream reuses.
  for (auto& t : reads) wait(t);
  for (auto& t : writes) wait(t);
  return status;
}

absl::Status SwappedOptimizer::step(float lr, int64_t step, float grad_scale, const Fill& grads,
                                    const MasterOut& updated) {
  return stream(true, true, [&](int g) {
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
    if (!updated) return absl::OkStatus();
    for (size_t i = 0; i < sg.pieces.size(); ++i) {
      ZEROD_RETURN_IF_ERROR(updated(sg.source[i], sg.start[i], sg.pieces[i].numel, sg.pieces[i].master));
    }
    return absl::OkStatus();
  });
}

absl::Status SwappedOptimizer::read_masters(const MasterOut& out) {
  auto copy_out = [&](int g) {
    const SubGroup& sg = groups_[g];
    for (size_t i = 0; i < sg.pieces.size(); ++i) {
      ZEROD_RETURN_IF_ERROR(out(sg.source[i], sg.start[i], sg.pieces[i].numel, sg.pieces[i].master));
    }
    return absl::OkStatus();
  };
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
