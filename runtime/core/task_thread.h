// One thread that runs tasks in the order they are submitted, for host work
// that overlaps the caller's (the host's part of an offloaded step while the
// device computes). A task's status comes back through its future; the
// first failure is also what drain() reports.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "runtime/core/status.h"

namespace zerod {

class TaskThread {
 public:
  using Task = std::function<absl::Status()>;
  // `start` runs first on the thread (binding it to a device); when it
  // fails, every task fails with its status instead of running.
  explicit TaskThread(Task start = {});
  // Runs what is queued, then stops.
  ~TaskThread();
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  std::shared_future<absl::Status> submit(Task task);
  // Waits for every task submitted so far; the first failure since the last
  // drain, or OK.
  absl::Status drain();

 private:
  void loop(const Task& start);

  absl::Status ready_;  // start's status; the thread's own
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::packaged_task<absl::Status()>> queue_;
  bool running_ = false, stop_ = false;
  absl::Status first_error_;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace zerod
