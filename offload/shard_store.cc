#include "offload/shard_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

uint64_t record_bytes(int64_t numel, DType dtype) { return io_align_up(numel * dtype_size(dtype)); }

}  // namespace

uint64_t ShardStore::file_bytes(const std::vector<int64_t>& chunks, DType dtype) {
  uint64_t bytes = 0;
  for (int64_t c : chunks) bytes += record_bytes(c, dtype);
  return bytes;
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::create(std::vector<int64_t> chunks, int64_t window_numel,
                                                               DType dtype, const ShardStoreSettings& s) {
  if (s.buffer_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("buffer_count must be at least 1, got ", s.buffer_count));
  }
  std::unique_ptr<ShardStore> p(new ShardStore());
  p->chunks_ = std::move(chunks);
  p->window_numel_ = window_numel;
  p->dtype_ = dtype;
  p->category_ = s.category;
  p->acct_ = s.accountant;
  p->window_tier_ = s.host_tier;
  int64_t offset = 0;
  uint64_t record = 0;
  for (int64_t c : p->chunks_) {
    p->offsets_.push_back(offset);
    p->records_.push_back(record);
    offset += c;
    record += record_bytes(c, dtype);
  }
  ZEROD_RETURN_IF_ERROR(p->allocate_window(s.buffer_count));
  const BufferSpec records = buffers(p->chunks_, window_numel, dtype, s)[kRecords];
  if (records.tier == Tier::kNvme) {
    ZEROD_ASSIGN_OR_RETURN(p->io_, AioEngine::create(s.aio, s.hook));
    ZEROD_ASSIGN_OR_RETURN(p->file_, p->io_->create_scratch(s.file, records.bytes));
    ZEROD_RETURN_IF_ERROR(s.accountant->reserve(Tier::kNvme, records.category, records.bytes));
    p->nvme_reserved_ = records.bytes;
  } else {
    ZEROD_ASSIGN_OR_RETURN(p->host_, Buffer::allocate(records.bytes, records.category, *records.tier, *s.accountant));
    if (records.tier != Tier::kPinned) parallel_fill(p->host_.data(), 0, records.bytes);  // pinned comes zeroed
    p->host_records_ = p->host_.host<char>();
  }
  return p;
}

uint64_t ShardStore::window_bytes(int64_t window_numel, DType dtype) { return record_bytes(window_numel, dtype); }

uint64_t ShardStore::large_window_bytes(const std::vector<int64_t>& chunks, int64_t window_numel, DType dtype) {
  int64_t largest = 0;
  for (int64_t c : chunks) {
    if (c > window_numel) largest = std::max(largest, c);
  }
  return largest > 0 ? record_bytes(largest, dtype) : 0;
}

absl::Status ShardStore::allocate_window(int buffer_count) {
  const std::vector<BufferSpec> w =
      window_buffers(chunks_, window_numel_, dtype_, category_, window_tier_, buffer_count);
  for (int i = 0; i < w[kWindows].count; ++i) {
    ZEROD_ASSIGN_OR_RETURN(Buffer b, Buffer::allocate(w[kWindows].bytes, w[kWindows].category, window_tier_, *acct_));
    small_.emplace_back().buf = std::move(b);
  }
  if (w[kLargeWindow].count > 0) {
    ZEROD_ASSIGN_OR_RETURN(Buffer b,
                           Buffer::allocate(w[kLargeWindow].bytes, w[kLargeWindow].category, window_tier_, *acct_));
    large_.emplace_back().buf = std::move(b);
  }
  return absl::OkStatus();
}

std::vector<BufferSpec> ShardStore::window_buffers(const std::vector<int64_t>& chunks, int64_t window_numel,
                                                   DType dtype, Category c, Tier tier, int buffer_count) {
  const std::string what = absl::StrCat("window of the offloaded ", category_name(c));
  const uint64_t large = large_window_bytes(chunks, window_numel, dtype);
  return {{what, Category::kOffload, window_bytes(window_numel, dtype), buffer_count, tier},
          {what + ", for the larger chunk", Category::kOffload, large, large > 0 ? 1 : 0, tier}};
}

std::vector<BufferSpec> ShardStore::buffers(const std::vector<int64_t>& chunks, int64_t window_numel, DType dtype,
                                            const ShardStoreSettings& s) {
  std::vector<BufferSpec> specs = window_buffers(chunks, window_numel, dtype, s.category, s.host_tier, s.buffer_count);
  specs.push_back({absl::StrCat("offloaded ", category_name(s.category)), s.category, file_bytes(chunks, dtype), 1,
                   s.device == OffloadDevice::kNvme ? Tier::kNvme : s.host_tier});
  return specs;
}

absl::StatusOr<std::unique_ptr<ShardStore>> ShardStore::writer(int buffer_count) const {
  std::unique_ptr<ShardStore> w(new ShardStore());
  w->chunks_ = chunks_;
  w->offsets_ = offsets_;
  w->records_ = records_;
  w->window_numel_ = window_numel_;
  w->dtype_ = dtype_;
  w->category_ = category_;
  w->acct_ = acct_;
  w->window_tier_ = window_tier_;
  w->host_records_ = host_records_;
  w->io_ = io_;
  w->file_ = file_;
  ZEROD_RETURN_IF_ERROR(w->allocate_window(buffer_count));
  return w;
}

ShardStore::~ShardStore() {
  // Every transfer from the window ends before it goes (the engine may be
  // a writer's too).
  for (auto* pool : {&small_, &large_}) {
    for (Window& w : *pool) finish_io(w).IgnoreError();
  }
  io_.reset();
  if (acct_) acct_->release(Tier::kNvme, category_, nvme_reserved_);
}

ShardStore::Window* ShardStore::find(int u) {
  for (Window& w : pool(u)) {
    if (w.unit == u) return &w;
  }
  return nullptr;
}

// A buffer that holds nothing, or else, when `evict`, one holding a unit
// read ahead but not acquired (that read is given up); a transfer still in
// flight from it is waited for, and a write-back's failure returned.
absl::StatusOr<ShardStore::Window*> ShardStore::free_window(int u, bool evict) {
  Window* unused = nullptr;
  for (Window& w : pool(u)) {
    if (w.unit < 0) {
      ZEROD_RETURN_IF_ERROR(finish_io(w));
      return &w;
    }
    if (evict && !w.acquired && &w != filling_ && !unused) unused = &w;
  }
  if (unused) {
    finish_io(*unused).IgnoreError();  // a read nobody will use
    unused->unit = -1;
  }
  return unused;
}

absl::Status ShardStore::finish_writes(int u) {
  for (Window& o : pool(u)) {
    if (o.writing == u) ZEROD_RETURN_IF_ERROR(finish_io(o));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::start_read(Window& w, int u) {
  ZEROD_RETURN_IF_ERROR(finish_writes(u));
  w.unit = u;
  if (io_) {
    w.io = io_->read(file_, records_[u], w.buf.data(), record_bytes(chunks_[u], dtype_));
  } else {
    parallel_copy(w.buf.data(), host_records_ + records_[u], chunks_[u] * dtype_size(dtype_));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::finish_io(Window& w) {
  w.writing = -1;
  if (!w.io) return absl::OkStatus();
  return io_->wait(std::exchange(w.io, nullptr));
}

absl::Status ShardStore::fetch(int u) {
  if (!io_ || find(u)) return absl::OkStatus();  // host records are read where they are
  ZEROD_ASSIGN_OR_RETURN(Window * w, free_window(u, false));
  return w ? start_read(*w, u) : absl::OkStatus();
}

absl::StatusOr<void*> ShardStore::acquire(int u) {
  if (!io_) {
    // The record itself (pinned where a GPU copies from it): no copy
    // through the window, once what was put of u is in it.
    if (filling_ && filling_->unit == u) ZEROD_RETURN_IF_ERROR(write_current());
    return host_records_ + records_[u];
  }
  Window* w = find(u);
  if (!w) {
    ZEROD_ASSIGN_OR_RETURN(w, free_window(u, true));
    if (!w) {
      return absl::FailedPreconditionError(
          absl::StrCat("no free offload buffer for unit ", u, ": all ", pool(u).size(), " are acquired"));
    }
    ZEROD_RETURN_IF_ERROR(start_read(*w, u));
  }
  if (absl::Status s = finish_io(*w); !s.ok()) {
    w->unit = -1;
    return s;
  }
  w->acquired = true;
  return w->buf.data();
}

void ShardStore::release(int u) {
  if (!io_) return;
  if (Window* w = find(u)) {
    w->unit = -1;
    w->acquired = false;
  }
}

absl::Status ShardStore::drop() {
  absl::Status first;
  for (auto* pool : {&small_, &large_}) {
    for (Window& w : *pool) {
      first.Update(finish_io(w));
      w.unit = -1;
      w.acquired = false;
    }
  }
  return first;
}

int ShardStore::unit_at(int64_t offset) const {
  return static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), offset) - offsets_.begin()) - 1;
}

absl::StatusOr<char*> ShardStore::filling(int u, bool keep) {
  if (!filling_ || filling_->unit != u) {
    ZEROD_RETURN_IF_ERROR(write_current());
    // Small units go round the pool, so a unit is filled while the writes
    // of the ones before it are in flight; one read ahead is taken as it is,
    // and a window holding another's read ahead only when none is free.
    Window* w = find(u);
    if (!w) {
      std::vector<Window>& p = pool(u);
      if (&p == &small_) {
        size_t i = 0;
        while (i + 1 < p.size() && p[(next_small_ + i) % p.size()].unit >= 0) ++i;
        next_small_ += i;
        w = &p[next_small_++ % p.size()];
      } else {
        w = &p[0];
      }
      ZEROD_RETURN_IF_ERROR(finish_io(*w));
      if (keep) {
        ZEROD_RETURN_IF_ERROR(start_read(*w, u));
      } else {
        w->unit = u;
      }
    }
    if (absl::Status s = finish_io(*w); !s.ok()) {  // its read, if any
      w->unit = -1;
      return s;
    }
    if (!keep) std::memset(w->buf.data(), 0, record_bytes(chunks_[u], dtype_));
    filling_ = w;
  }
  return filling_->buf.host<char>();
}

absl::Status ShardStore::put(int64_t offset, const float* src, int64_t n) {
  const int u = unit_at(offset);
  ZEROD_ASSIGN_OR_RETURN(char* unit, filling(u, false));
  convert_from_f32(dtype_, src, unit + (offset - offsets_[u]) * dtype_size(dtype_), n);
  return absl::OkStatus();
}

absl::Status ShardStore::add(int64_t offset, const void* src, DType from, int64_t n, bool onto_zero) {
  const int u = unit_at(offset);
  ZEROD_ASSIGN_OR_RETURN(char* unit, filling(u, !onto_zero));
  accumulate_f32(from, src, reinterpret_cast<float*>(unit) + (offset - offsets_[u]), n, onto_zero);
  return absl::OkStatus();
}

const void* ShardStore::unwritten(int u) const {
  return filling_ && filling_->unit == u ? filling_->buf.data() : nullptr;
}

void ShardStore::discard(int u) {
  if (!filling_ || filling_->unit != u) return;
  std::exchange(filling_, nullptr)->unit = -1;
}

absl::Status ShardStore::write_current() {
  if (!filling_) return absl::OkStatus();
  Window& w = *std::exchange(filling_, nullptr);
  const int u = std::exchange(w.unit, -1);
  if (io_) {
    ZEROD_RETURN_IF_ERROR(finish_writes(u));
    w.io = io_->write(file_, records_[u], w.buf.data(), record_bytes(chunks_[u], dtype_));
    w.writing = u;
  } else {
    parallel_copy(host_records_ + records_[u], w.buf.data(), chunks_[u] * dtype_size(dtype_));
  }
  return absl::OkStatus();
}

absl::Status ShardStore::flush() {
  absl::Status first = write_current();
  next_small_ = 0;
  for (auto* pool : {&small_, &large_}) {
    for (Window& w : *pool) first.Update(finish_io(w));
  }
  return first;
}

}  // namespace zerod
