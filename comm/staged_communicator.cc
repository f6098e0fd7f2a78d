#include "comm/staged_communicator.h"

#include <functional>
#include <future>

#include "runtime/core/task_thread.h"

namespace zerod {
namespace {

class StagedWork : public Work {
 public:
  explicit StagedWork(std::shared_future<absl::Status> done) : done_(std::move(done)) {}
  absl::Status wait() override { return done_.get(); }

 private:
  std::shared_future<absl::Status> done_;
};

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(Communicator& inner, Device& device, std::unique_ptr<Communicator> owned)
      : owned_(std::move(owned)), inner_(&inner), device_(device), thread_([this] { return start(); }) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const char* backend() const override { return inner_->backend(); }

  WorkPtr all_reduce(void* buf, int64_t count, CommType type, ReduceOp op) override {
    const uint64_t bytes = count * comm_type_size(type);
    return submit([=, this] {
      return staged({buf, bytes, true, true}, {},
                    [&](void* b, void*) { return inner_->all_reduce(b, count, type, op)->wait(); });
    });
  }

  WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, CommType type, ReduceOp op) override {
    const uint64_t bytes = count * comm_type_size(type);
    return submit([=, this] {
      return staged({const_cast<void*>(send), bytes * world_size(), true, false}, {recv, bytes, false, true},
                    [&](void* s, void* r) { return inner_->reduce_scatter(s, r, count, type, op)->wait(); });
    });
  }

  // In place (send is block rank() of recv) only recv is staged, its own
  // block copied in.
  WorkPtr all_gather(const void* send, void* recv, int64_t count, CommType type) override {
    const uint64_t bytes = count * comm_type_size(type);
    const uint64_t own = bytes * rank();
    const bool in_place = send == static_cast<const char*>(recv) + own;
    return submit([=, this]() -> absl::Status {
      if (in_place) {
        return staged({recv, bytes * world_size(), true, true, own, bytes}, {}, [&](void* r, void*) {
          return inner_->all_gather(static_cast<char*>(r) + own, r, count, type)->wait();
        });
      }
      return staged({const_cast<void*>(send), bytes, true, false}, {recv, bytes * world_size(), false, true},
                    [&](void* s, void* r) { return inner_->all_gather(s, r, count, type)->wait(); });
    });
  }

  WorkPtr broadcast(void* buf, int64_t count, CommType type, int root) override {
    const uint64_t bytes = count * comm_type_size(type);
    return submit([=, this] {
      return staged({buf, bytes, rank() == root, true}, {},
                    [&](void* b, void*) { return inner_->broadcast(b, count, type, root)->wait(); });
    });
  }

  WorkPtr barrier() override {
    return submit([this] { return inner_->barrier()->wait(); });
  }

  void abort(int exit_code) override { inner_->abort(exit_code); }

 private:
  // A collective's buffer: `bytes` at p; copied in before the collective
  // (bytes [in_offset, in_offset + in_bytes), all of them when in_bytes is
  // 0) and out after it, as the flags say.
  struct Side {
    void* p = nullptr;
    uint64_t bytes = 0;
    bool in = false, out = false;
    uint64_t in_offset = 0, in_bytes = 0;
  };

  // Runs `run` on the buffers' host stand-ins: device memory is staged
  // (first side in staging_[0], second in staging_[1]).
  absl::Status staged(const Side& a, const Side& b, const std::function<absl::Status(void*, void*)>& run) {
    ZEROD_RETURN_IF_ERROR(ready_);
    void* host[2] = {a.p, b.p};
    const Side* sides[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      const Side& s = *sides[i];
      if (!s.p || !device_.holds(s.p)) continue;
      if (staging_[i].bytes() < s.bytes) {
        staging_[i].reset();
        ZEROD_ASSIGN_OR_RETURN(staging_[i], device_.allocate(s.bytes, Category::kComm, staging_tier(device_)));
      }
      host[i] = staging_[i].data();
      if (s.in) {
        const uint64_t n = s.in_bytes ? s.in_bytes : s.bytes;
        device_.copy(*stream_, static_cast<char*>(host[i]) + s.in_offset, static_cast<char*>(s.p) + s.in_offset, n);
      }
    }
    ZEROD_RETURN_IF_ERROR(device_.synchronize(*stream_));
    ZEROD_RETURN_IF_ERROR(run(host[0], host[1]));
    for (int i = 0; i < 2; ++i) {
      if (host[i] != sides[i]->p && sides[i]->out) device_.copy(*stream_, sides[i]->p, host[i], sides[i]->bytes);
    }
    return device_.synchronize(*stream_);
  }

  WorkPtr submit(TaskThread::Task op) { return std::make_unique<StagedWork>(thread_.submit(std::move(op))); }

  // On the thread, before any collective: a thread that cannot reach the
  // device leaves every staged collective to fail with the reason.
  absl::Status start() {
    ready_ = device_.bind_thread();
    absl::StatusOr<std::unique_ptr<Stream>> stream = device_.create_stream();
    if (ready_.ok()) ready_ = stream.status();
    if (stream.ok()) stream_ = std::move(*stream);
    return absl::OkStatus();
  }

  std::unique_ptr<Communicator> owned_;  // inner_, when the communicator owns it
  Communicator* inner_;
  Device& device_;
  // The thread's own: whether it reaches the device, its copy stream and
  // the staging buffers, grown to the largest collective.
  absl::Status ready_;
  std::unique_ptr<Stream> stream_;
  Buffer staging_[2];
  // Every collective, staged or not, in issue order; last, so it stops
  // (running what is queued) before the buffers go.
  TaskThread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(Communicator& inner, Device& device) {
  return std::make_unique<StagedCommunicator>(inner, device, nullptr);
}

std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> inner, Device& device) {
  Communicator& c = *inner;
  return std::make_unique<StagedCommunicator>(c, device, std::move(inner));
}

}  // namespace zerod
