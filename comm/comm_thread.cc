#include "comm/comm_thread.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zerod {

struct CommThread::Op {
  std::string name;
  int64_t seq = 0;
  std::function<absl::Status(int64_t seq)> run;
  bool done = false;
  absl::Status status;
};

class CommThread::OpWork : public Work {
 public:
  OpWork(CommThread* owner, std::shared_ptr<Op> op) : owner_(owner), op_(std::move(op)) {}
  absl::Status wait() override { return owner_->wait_for(op_); }

 private:
  CommThread* owner_;
  std::shared_ptr<Op> op_;
};

CommThread::CommThread(std::chrono::milliseconds timeout, Describe describe_stuck)
    : timeout_(timeout), describe_(std::move(describe_stuck)), thread_([this] { loop(); }) {}

bool CommThread::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) return clean_;
  stop_ = true;
  cv_.notify_all();
  if (!broken_.ok() &&
      !cv_.wait_for(lock, timeout_, [&] { return queue_.empty() && running_ == nullptr; })) {
    thread_.detach();
    return clean_ = false;
  }
  lock.unlock();
  thread_.join();
  return clean_ = true;
}

bool CommThread::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !broken_.ok();
}

WorkPtr CommThread::submit(std::string name, std::function<absl::Status(int64_t seq)> run) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return completed_work(broken_);
  auto op = std::make_shared<Op>();
  op->name = std::move(name);
  op->seq = next_seq_++;
  op->run = std::move(run);
  queue_.push_back(op);
  cv_.notify_all();
  return std::make_unique<OpWork>(this, std::move(op));
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    running_ = queue_.front();
    queue_.pop_front();
    lock.unlock();
    absl::Status s = running_->run(running_->seq);
    lock.lock();
    running_->status = std::move(s);
    running_->done = true;
    running_.reset();
    cv_.notify_all();
  }
}

absl::Status CommThread::wait_for(const std::shared_ptr<Op>& op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, timeout_, [&] { return op->done || !broken_.ok(); })) {
    return op->done ? op->status : broken_;
  }
  // Name the collective that holds the queue up: the one running (or, if
  // none is, the one waited on).
  const std::shared_ptr<Op> stuck = running_ ? running_ : op;
  const std::string name = stuck->name;
  const int64_t seq = stuck->seq;
  lock.unlock();
  const std::string who = describe_(name, seq);
  lock.lock();
  if (broken_.ok()) {
    broken_ = absl::DeadlineExceededError(absl::StrFormat("collective %s #%d did not complete within %.3g s: %s",
                                                          name, seq, timeout_.count() / 1000.0, who));
  }
  cv_.notify_all();
  return broken_;
}

}  // namespace zerod
