// The CPU backends' engine: collectives run one at a time, in issue order,
// on a thread of their own, so compute goes on while they run. A wait that
// outlives the timeout asks the backend to describe the stuck collective and
// breaks the communicator: the thread is then stuck in a call that may never
// return, so it is left behind rather than joined.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace zerod {

class CommThread {
 public:
  // describe_stuck(name, seq) says who has not arrived at collective `seq`.
  using Describe = std::function<std::string(const std::string& name, int64_t seq)>;
  CommThread(std::chrono::milliseconds timeout, Describe describe_stuck);
  ~CommThread() { shutdown(); }

  // Runs what is queued and stops the thread. After a timeout the stuck
  // collective gets one more timeout to finish (its late rank may yet come);
  // returns false if it did not, and the thread was left behind.
  bool shutdown();

  // Queues `run` under `name`; it is called with the collective's sequence
  // number, and its Work completes with run's status.
  WorkPtr submit(std::string name, std::function<absl::Status(int64_t seq)> run);
  bool broken() const;

 private:
  struct Op;
  class OpWork;
  void loop();
  absl::Status wait_for(const std::shared_ptr<Op>& op);

  const std::chrono::milliseconds timeout_;
  const Describe describe_;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // queue changes, op completions
  std::deque<std::shared_ptr<Op>> queue_;
  std::shared_ptr<Op> running_;       // the op the thread is executing
  int64_t next_seq_ = 1;
  bool stop_ = false;
  bool clean_ = true;     // shutdown() joined the thread
  absl::Status broken_;               // set when a wait timed out
  std::thread thread_;
};

}  // namespace zerod
