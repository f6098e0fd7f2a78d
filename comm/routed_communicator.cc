#include "comm/routed_communicator.h"

namespace zerod {
namespace {

class RoutedCommunicator : public Communicator {
 public:
  RoutedCommunicator(std::unique_ptr<Communicator> on_device, std::unique_ptr<Communicator> on_host,
                     const Device& device)
      : on_host_(std::move(on_host)), on_device_(std::move(on_device)), device_(device) {}

  int rank() const override { return on_host_->rank(); }
  int world_size() const override { return on_host_->world_size(); }
  const char* backend() const override { return on_device_->backend(); }

  WorkPtr all_reduce(void* buf, int64_t count, CommType type, ReduceOp op) override {
    return route(buf).all_reduce(buf, count, type, op);
  }
  WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, CommType type, ReduceOp op) override {
    return route(send, recv).reduce_scatter(send, recv, count, type, op);
  }
  WorkPtr all_gather(const void* send, void* recv, int64_t count, CommType type) override {
    return route(send, recv).all_gather(send, recv, count, type);
  }
  WorkPtr broadcast(void* buf, int64_t count, CommType type, int root) override {
    return route(buf).broadcast(buf, count, type, root);
  }
  // A barrier holds on both, so that neither has work in flight past it.
  WorkPtr barrier() override {
    absl::Status s = on_device_->barrier()->wait();
    s.Update(on_host_->barrier()->wait());
    return completed_work(std::move(s));
  }
  // The device's first, so its stuck collectives are left before the host's
  // communicator ends every rank.
  void abort(int exit_code) override {
    on_device_->abort(exit_code);
    on_host_->abort(exit_code);
  }

 private:
  Communicator& route(const void* a, const void* b = nullptr) {
    const bool device = device_.holds(a) && (!b || device_.holds(b));
    return device ? *on_device_ : *on_host_;
  }

  std::unique_ptr<Communicator> on_host_;
  std::unique_ptr<Communicator> on_device_;  // after on_host_: destroyed first
  const Device& device_;
};

}  // namespace

std::unique_ptr<Communicator> make_routed_communicator(std::unique_ptr<Communicator> on_device,
                                                       std::unique_ptr<Communicator> on_host, const Device& device) {
  return std::make_unique<RoutedCommunicator>(std::move(on_device), std::move(on_host), device);
}

}  // namespace zerod
