#include "runtime/core/task_thread.h"

namespace zerod {

TaskThread::TaskThread(Task start) : thread_([this, start = std::move(start)] { loop(start); }) {}

TaskThread::~TaskThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_future<absl::Status> TaskThread::submit(Task task) {
  // Runs on the thread, which has set ready_ before taking any task.
  std::packaged_task<absl::Status()> t([this, task = std::move(task)] {
    absl::Status s = ready_.ok() ? task() : ready_;
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (first_error_.ok()) first_error_ = s;
    }
    return s;
  });
  std::shared_future<absl::Status> done = t.get_future().share();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(t));
  }
  cv_.notify_one();
  return done;
}

absl::Status TaskThread::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && !running_; });
  return std::exchange(first_error_, absl::OkStatus());
}

void TaskThread::loop(const Task& start) {
  ready_ = start ? start() : absl::OkStatus();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::packaged_task<absl::Status()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
    idle_.notify_all();
  }
}

}  // namespace zerod
