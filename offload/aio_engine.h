// Asynchronous file I/O for the offload tiers, on io_uring. Files are opened
// once (O_DIRECT where the filesystem takes it, buffered with a warning where
// it does not) and kept open for the engine's life. A transfer is split into
// requests of at most `block_size` bytes; up to `queue_depth` of them are in
// flight at once, short reads and writes are resubmitted for the remainder,
// and a failure is returned as a Status naming the file and offset. One
// thread owned by the engine drives the ring; callers submit transfers and
// wait for them. While requests are in flight the thread sleeps in the ring,
// so a transfer submitted meanwhile is issued at the next completion.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/io_faults.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"

struct io_uring;

namespace zerod {

// Direct I/O needs offsets, sizes and buffer addresses aligned to the
// device's logical block; a page covers every common device, and Buffers of
// a page or more start on one.
inline constexpr uint64_t kIoAlign = kPageBytes;
inline uint64_t io_align_up(uint64_t n) { return (n + kIoAlign - 1) / kIoAlign * kIoAlign; }

struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
};

class AioEngine {
 public:
  class Transfer;
  using Ticket = std::shared_ptr<Transfer>;

  static absl::StatusOr<std::unique_ptr<AioEngine>> create(const AioConfig& cfg, IoFaultHook hook = {});
  // Waits for every transfer submitted, stops the thread, closes the files.
  ~AioEngine();
  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  // Creates `path` (which must not exist) for reading and writing and
  // unlinks it at once, so the space is returned when the engine ends, even
  // after a crash. `bytes` are allocated up front: a full disk is found here
  // rather than in the middle of a step. Returns the file's index.
  absl::StatusOr<int> create_scratch(const std::string& path, uint64_t bytes);
  // Opens an existing file for reading.
  absl::StatusOr<int> open_read(const std::string& path);
  // Whether file `f` does direct I/O.
  bool direct(int f) const;

  // Asynchronous: `buf` must stay valid and untouched until wait(). With
  // direct I/O, offset, bytes and buf must be multiples of kIoAlign.
  Ticket read(int f, uint64_t offset, void* buf, uint64_t bytes);
  Ticket write(int f, uint64_t offset, const void* buf, uint64_t bytes);
  // Blocks until the transfer is complete; its result.
  absl::Status wait(const Ticket& t);

  const AioConfig& config() const { return cfg_; }

 private:
  struct File {
    int fd = -1;
    std::string path;
    bool direct = false;
  };
  struct Request;
  AioEngine(const AioConfig& cfg, IoFaultHook hook);
  absl::StatusOr<int> open_file(const std::string& path, int flags, mode_t mode);
  Ticket submit(bool write, int f, uint64_t offset, void* buf, uint64_t bytes);
  void run();
  // Ring thread: requests of queued transfers onto the ring, up to the depth.
  void fill_ring(std::vector<Request*>& free_requests);
  // Called with mu_ held in `lock`.
  void complete(Request* r, int result, std::vector<Request*>& free_requests, std::unique_lock<std::mutex>& lock);
  // The ring itself failed: every transfer fails with `s`, now and later.
  void fail_all(const absl::Status& s, std::vector<Request>& pool);

  const AioConfig cfg_;
  const IoFaultHook hook_;
  std::unique_ptr<io_uring> ring_;
  std::vector<File> files_;  // appended before transfers that use them; never removed

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Ticket> queued_;  // transfers with requests still to issue
  int in_flight_ = 0;          // requests on the ring
  bool stop_ = false;
  absl::Status broken_;
  std::thread thread_;
};

}  // namespace zerod
