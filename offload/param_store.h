// Stage 3's parameter shard away from the working memory (offload_param):
// in host memory (pinned when a GPU will copy from it) or in a scratch file
// on NVMe. Each unit's chunk of the shard is one page-aligned record.
//
// Units come in through a fixed window of host buffers (Category offload):
// `buffer_count` sized to the common chunk (a layer's), and one for chunks
// larger than that (the embeddings), so host memory is the window whatever
// the model's depth. A read is started ahead of use (fetch), waited for
// when the unit is needed (acquire) and the buffer handed back after
// (release). After an optimizer step the updated elements come back in
// shard order (put) and are written unit by unit through the same window,
// the write of one unit overlapping the filling of the next.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/config/job_config.h"
#include "runtime/core/dtype.h"

namespace zerod {

struct ParamStoreSettings {
  OffloadDevice device;  // kCpu or kNvme
  std::string file;      // nvme: created, and unlinked at once
  int buffer_count;
  Tier host_tier;        // of the records in host memory, and of the window
  AioConfig aio;
  IoFaultHook hook;      // tests only
};

class ParamStore {
 public:
  // `chunks`: each unit's chunk of the shard, in elements of `dtype`, in
  // shard order; `window_numel`: the chunk the window's buffers are sized
  // for. The records start as zeros.
  static absl::StatusOr<std::unique_ptr<ParamStore>> create(std::vector<int64_t> chunks, int64_t window_numel,
                                                            DType dtype, const ParamStoreSettings& s);
  // Bytes of the records, for checking the disk before anything is allocated.
  static uint64_t file_bytes(const std::vector<int64_t>& chunks, DType dtype);
  // Waits for every transfer in flight.
  ~ParamStore();

  // Starts reading unit u into a free buffer, when one is free and u is not
  // in one already (reading ahead is best effort).
  void fetch(int u);
  // Unit u's chunk, read: waits for its fetch, or reads it now. Valid until
  // release(u).
  absl::StatusOr<const void*> acquire(int u);
  void release(int u);
  // Between passes: waits for reads in flight and frees every buffer.
  absl::Status drop();

  // Updated elements [offset, offset + n) of the shard, converted from fp32
  // as the optimizer writes its working copy. Calls come in increasing
  // order of offset and a call stays within one unit; elements not put keep
  // their values only if no element of their unit is put (a unit is
  // rewritten whole, the rest of it zero). Errors surface at flush().
  void put(int64_t offset, const float* src, int64_t n);
  // Every put written; the first error since the last flush.
  absl::Status flush();

  int64_t window_bytes() const;

 private:
  struct Window {
    Buffer buf;
    int unit = -1;           // held, or being read
    bool acquired = false;
    AioEngine::Ticket io;    // the read of `unit`, or a write-back
  };
  ParamStore() = default;
  int unit_at(int64_t offset) const;
  std::vector<Window>& pool(int u) { return chunks_[u] > window_numel_ ? large_ : small_; }
  Window* find(int u);
  Window* free_window(int u);
  void start_read(Window& w, int u);
  absl::Status finish_io(Window& w);
  void write_current();

  std::vector<int64_t> chunks_, offsets_;  // elements, and each unit's offset in the shard
  std::vector<uint64_t> records_;          // each unit's record offset in the file or host memory
  int64_t window_numel_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<Window> small_, large_;
  Buffer host_;                            // device cpu: the records
  std::unique_ptr<AioEngine> io_;          // device nvme
  int file_ = -1;
  uint64_t nvme_reserved_ = 0;
  // The unit being filled by put(), and the next window of each pool to fill.
  Window* filling_ = nullptr;
  size_t next_small_ = 0;
  absl::Status put_status_;
};

}  // namespace zerod
