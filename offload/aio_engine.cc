#include "offload/aio_engine.h"

#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace zerod {

class AioEngine::Transfer {
 public:
  bool write;
  int file;
  uint64_t offset;
  char* buf;
  uint64_t bytes;
  uint64_t issued = 0;   // bytes handed to requests so far
  int outstanding = 0;   // its requests on the ring
  bool done = false;
  absl::Status status;
};

struct AioEngine::Request {
  Ticket t;
  uint64_t offset;
  char* buf;
  uint32_t len;
};

AioEngine::AioEngine(const AioConfig& cfg, IoFaultHook hook) : cfg_(cfg), hook_(std::move(hook)) {}

absl::StatusOr<std::unique_ptr<AioEngine>> AioEngine::create(const AioConfig& cfg, IoFaultHook hook) {
  if (cfg.block_size < static_cast<int64_t>(kIoAlign) || cfg.block_size % kIoAlign != 0 ||
      cfg.block_size > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("aio.block_size must be a multiple of ", kIoAlign,
                                                   " bytes up to 1 GiB, got ", cfg.block_size));
  }
  if (cfg.queue_depth < 1 || cfg.queue_depth > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("aio.queue_depth must be in [1, 4096], got ", cfg.queue_depth));
  }
  std::unique_ptr<AioEngine> e(new AioEngine(cfg, std::move(hook)));
  e->ring_ = std::make_unique<io_uring>();
  if (int r = io_uring_queue_init(cfg.queue_depth, e->ring_.get(), 0); r < 0) {
    e->ring_.reset();
    return absl::ErrnoToStatus(-r, "io_uring_queue_init (is io_uring allowed in this container?)");
  }
  e->thread_ = std::thread([p = e.get()] { p->run(); });
  return e;
}

AioEngine::~AioEngine() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    thread_.join();
  }
  if (ring_) io_uring_queue_exit(ring_.get());
  for (File& f : files_) ::close(f.fd);
}

absl::StatusOr<int> AioEngine::open_file(const std::string& path, int flags, mode_t mode) {
  auto try_open = [&](int fl) -> int {
    if (hook_.on_open) {
      if (int err = hook_.on_open(path, fl); err != 0) {
        errno = err;
        return -1;
      }
    }
    return ::open(path.c_str(), fl | O_CLOEXEC, mode);
  };
  File f{-1, path, true};
  f.fd = try_open(flags | O_DIRECT);
  if (f.fd < 0 && errno == EINVAL) {
    // The filesystem refuses O_DIRECT (older tmpfs, some network mounts).
    std::fprintf(stderr, "warning: %s: the filesystem refuses direct I/O; using buffered I/O\n", path.c_str());
    f.direct = false;
    f.fd = try_open(flags);
  }
  if (f.fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::lock_guard<std::mutex> lock(mu_);
  files_.push_back(f);
  return static_cast<int>(files_.size() - 1);
}

absl::StatusOr<int> AioEngine::create_scratch(const std::string& path, uint64_t bytes) {
  ZEROD_ASSIGN_OR_RETURN(int f, open_file(path, O_RDWR | O_CREAT | O_EXCL, 0600));
  const int fd = files_[f].fd;
  ::unlink(path.c_str());
  if (bytes > 0) {
    if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
      return absl::ErrnoToStatus(err, absl::StrCat("cannot allocate ", bytes, " bytes for ", path));
    }
  }
  return f;
}

absl::StatusOr<int> AioEngine::open_read(const std::string& path) { return open_file(path, O_RDONLY, 0); }

bool AioEngine::direct(int f) const { return files_[f].direct; }

AioEngine::Ticket AioEngine::read(int f, uint64_t offset, void* buf, uint64_t bytes) {
  return submit(false, f, offset, buf, bytes);
}

AioEngine::Ticket AioEngine::write(int f, uint64_t offset, const void* buf, uint64_t bytes) {
  // The buffer is only read from; Transfer keeps one pointer type for both.
  return submit(true, f, offset, const_cast<void*>(buf), bytes);
}

AioEngine::Ticket AioEngine::submit(bool write, int f, uint64_t offset, void* buf, uint64_t bytes) {
  auto t = std::make_shared<Transfer>();
  t->write = write;
  t->file = f;
  t->offset = offset;
  t->buf = static_cast<char*>(buf);
  t->bytes = bytes;
  std::lock_guard<std::mutex> lock(mu_);
  const File& file = files_[f];
  if (file.direct && (offset % kIoAlign || bytes % kIoAlign || reinterpret_cast<uintptr_t>(buf) % kIoAlign)) {
    t->status = absl::InvalidArgumentError(absl::StrCat(file.path, ": direct I/O at offset ", offset, " of ", bytes,
                                                        " bytes is not aligned to ", kIoAlign));
  }
  if (hook_.on_submit) hook_.on_submit(write, file.path, offset, bytes);
  t->status.Update(broken_);
  if (!t->status.ok() || bytes == 0) {
    t->done = true;
    return t;
  }
  queued_.push_back(t);
  work_cv_.notify_all();
  return t;
}

absl::Status AioEngine::wait(const Ticket& t) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return t->done; });
  return t->status;
}

void AioEngine::fill_ring(std::vector<Request*>& free_requests) {
  while (!queued_.empty() && !free_requests.empty()) {
    Ticket t = queued_.front();
    if (!t->status.ok() || t->issued == t->bytes) {
      queued_.pop_front();
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (!sqe) return;
    Request* r = free_requests.back();
    free_requests.pop_back();
    const uint64_t len = std::min<uint64_t>(cfg_.block_size, t->bytes - t->issued);
    *r = Request{t, t->offset + t->issued, t->buf + t->issued, static_cast<uint32_t>(len)};
    t->issued += len;
    ++t->outstanding;
    ++in_flight_;
    const int fd = files_[t->file].fd;
    if (t->write) {
      io_uring_prep_write(sqe, fd, r->buf, r->len, r->offset);
    } else {
      io_uring_prep_read(sqe, fd, r->buf, r->len, r->offset);
    }
    io_uring_sqe_set_data(sqe, r);
  }
}

void AioEngine::complete(Request* r, int result, std::vector<Request*>& free_requests,
                         std::unique_lock<std::mutex>& lock) {
  Transfer& t = *r->t;
  if (hook_.on_complete) {
    // Unlocked: a hook that takes its time holds up no caller.
    const std::string path = files_[t.file].path;
    lock.unlock();
    result = hook_.on_complete(t.write, path, r->offset, r->len, result);
    lock.lock();
  }
  const File& file = files_[t.file];
  auto resubmit = [&] {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (t.write) {
      io_uring_prep_write(sqe, file.fd, r->buf, r->len, r->offset);
    } else {
      io_uring_prep_read(sqe, file.fd, r->buf, r->len, r->offset);
    }
    io_uring_sqe_set_data(sqe, r);
  };
  const char* op = t.write ? "write" : "read";
  if (result == -EINTR || result == -EAGAIN) {
    resubmit();
    return;
  }
  if (result < 0) {
    t.status.Update(absl::ErrnoToStatus(
        -result, absl::StrCat(op, " of ", r->len, " bytes at offset ", r->offset, " of ", file.path, " failed")));
  } else if (result == 0) {
    t.status.Update(absl::DataLossError(absl::StrCat(op, " of ", r->len, " bytes at offset ", r->offset, " of ",
                                                     file.path, t.write ? " wrote nothing" : " hit the end of the file")));
  } else if (static_cast<uint32_t>(result) < r->len && t.status.ok()) {
    // Short: the rest of this request goes again from where it stopped.
    r->offset += result;
    r->buf += result;
    r->len -= result;
    resubmit();
    return;
  }
  --in_flight_;
  free_requests.push_back(r);
  if (--t.outstanding == 0 && (!t.status.ok() || t.issued == t.bytes)) {
    t.done = true;
    done_cv_.notify_all();
  }
  r->t.reset();
}

void AioEngine::fail_all(const absl::Status& s, std::vector<Request>& pool) {
  broken_ = s;
  for (Request& r : pool) {
    if (r.t) queued_.push_back(std::exchange(r.t, nullptr));
  }
  for (const Ticket& t : queued_) {
    t->status.Update(s);
    t->done = true;
  }
  queued_.clear();
  in_flight_ = 0;
  done_cv_.notify_all();
}

void AioEngine::run() {
  std::vector<Request> pool(cfg_.queue_depth);
  std::vector<Request*> free_requests;
  for (Request& r : pool) free_requests.push_back(&r);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    fill_ring(free_requests);
    if (in_flight_ == 0) {
      if (stop_ && queued_.empty()) break;
      work_cv_.wait(lock);
      continue;
    }
    lock.unlock();
    int r;
    do {
      r = io_uring_submit_and_wait(ring_.get(), 1);
    } while (r == -EINTR || r == -EAGAIN || r == -EBUSY);
    lock.lock();
    if (r < 0) {
      fail_all(absl::ErrnoToStatus(-r, "io_uring_submit"), pool);
      break;
    }
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(ring_.get(), head, cqe) {
      complete(static_cast<Request*>(io_uring_cqe_get_data(cqe)), cqe->res, free_requests, lock);
      ++seen;
    }
    io_uring_cq_advance(ring_.get(), seen);
  }
}

}  // namespace zerod
