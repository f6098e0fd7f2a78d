// A rank's shard of a flat buffer away from the working memory: in host
// memory (pinned when a GPU will copy from it) or in a scratch file on NVMe,
// one page-aligned record per unit. Stage 3's parameters live here with
// offload_param, and the gradient shard with offload_optimizer nvme.
//
// Units in a file come in through a fixed window of host buffers (Category
// offload): `buffer_count` sized to the common chunk (a layer's), and one
// for chunks larger than that (the embeddings), so host memory is the
// window whatever the model's depth. A read is started ahead of use
// (fetch), waited for when the unit is needed (acquire) and the buffer
// handed back after (release). Units in host memory are read where they
// are. New values come in unit by unit (put, or add to accumulate)
// and are written through the same window, the write of one unit
// overlapping the filling of the next.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "offload/offload_config.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory_plan.h"

namespace zerod {

struct ShardStoreSettings {
  OffloadDevice device;  // kCpu or kNvme
  Category category;     // of what the records hold
  std::string file;      // nvme: created, and unlinked at once
  int buffer_count;
  Tier host_tier;  // of the records in host memory, and of the window
  AioConfig aio;
  IoFaultHook hook;                                            // tests only
  MemoryAccountant* accountant = &MemoryAccountant::global();  // of the window, the records and the file
};

class ShardStore {
 public:
  // `chunks`: each unit's chunk of the shard, in elements of `dtype`, in
  // shard order; `window_numel`: the chunk the window's buffers are sized
  // for. The records start as zeros.
  static absl::StatusOr<std::unique_ptr<ShardStore>> create(std::vector<int64_t> chunks, int64_t window_numel,
                                                            DType dtype, const ShardStoreSettings& s);
  // Bytes of the records, for checking the disk before anything is allocated.
  static uint64_t file_bytes(const std::vector<int64_t>& chunks, DType dtype);
  // What create() allocates, by Buffers: its window, and the records in
  // host memory or the file's space (tier kNvme); and what the window of
  // a writer(buffer_count) of a store of category `c` adds (the first two).
  enum Buffers { kWindows, kLargeWindow, kRecords };
  static std::vector<BufferSpec> buffers(const std::vector<int64_t>& chunks, int64_t window_numel, DType dtype,
                                         const ShardStoreSettings& s);
  static std::vector<BufferSpec> window_buffers(const std::vector<int64_t>& chunks, int64_t window_numel, DType dtype,
                                                Category c, Tier tier, int buffer_count);
  // Waits for every transfer in flight.
  ~ShardStore();

  // Starts reading unit u into a free buffer, when one is free and u is not
  // in one already (reading ahead is best effort); fails when a write-back
  // it had to wait for failed.
  absl::Status fetch(int u);
  // Unit u's chunk, read: waits for its fetch, or reads it now; in host
  // memory, the record itself (fetch does nothing there). Valid until
  // release(u), and not to be changed.
  absl::StatusOr<void*> acquire(int u);
  void release(int u);
  // Between passes: waits for reads in flight and frees every buffer.
  absl::Status drop();

  // New values of elements [offset, offset + n) of the shard, converted
  // from fp32 as the optimizer writes its working copy. A call stays within
  // one unit, and the calls for a unit come one after another: the unit is
  // rewritten whole when the next one starts, its elements not put zero.
  // Not while any unit is acquired. Fails when a transfer it waits for (the
  // write-back of a unit before, or a read) failed.
  absl::Status put(int64_t offset, const float* src, int64_t n);
  // The same, adding src (of type `from`, widened) to the stored values
  // (fp32 stores only), or to zeros when `onto_zero` (the stored values are
  // not read).
  absl::Status add(int64_t offset, const void* src, DType from, int64_t n, bool onto_zero);
  // Unit u's record in host memory (device cpu; null in a file), for a
  // copy from a GPU to write in place of put(): as put()'s, once u is
  // acquired no more for the pass and before its next acquire.
  void* host_record(int u) const { return host_records_ ? host_records_ + records_[u] : nullptr; }
  // Unit u's values as put or added so far while it is the one being filled
  // (not yet written), valid until the next put, add or flush; else null.
  const void* unwritten(int u) const;
  // Unit u, the one being filled, is dropped unwritten: its record keeps
  // what it had (for values used from unwritten() and needed no more).
  void discard(int u);
  // Every put written; the first failure among the writes still in flight.
  absl::Status flush();

  // A second store over the same records with a window of its own
  // (`buffer_count` buffers, and one for the larger chunks), so one thread
  // can put() through it while another acquires units here: a unit it
  // writes must not be read here until its flush(). This store outlives it.
  absl::StatusOr<std::unique_ptr<ShardStore>> writer(int buffer_count) const;

 private:
  struct Window {
    Buffer buf;
    int unit = -1;  // held, or being read
    bool acquired = false;
    AioEngine::Ticket io;  // the read of `unit`, or a write-back
    int writing = -1;      // the unit of that write-back
  };
  ShardStore() = default;
  absl::Status allocate_window(int buffer_count);  // window_buffers(buffer_count)
  // The window's buffers: `buffer_count` of window_numel's record, and one
  // of the largest chunk past that (0 when none is).
  static uint64_t window_bytes(int64_t window_numel, DType dtype);
  static uint64_t large_window_bytes(const std::vector<int64_t>& chunks, int64_t window_numel, DType dtype);
  int unit_at(int64_t offset) const;
  std::vector<Window>& pool(int u) { return chunks_[u] > window_numel_ ? large_ : small_; }
  Window* find(int u);
  absl::StatusOr<Window*> free_window(int u, bool evict);
  // io_uring does not order transfers in flight: a read or write of unit u
  // waits for a write-back of u still in flight.
  absl::Status finish_writes(int u);
  // Reads unit u into w.
  absl::Status start_read(Window& w, int u);
  absl::Status finish_io(Window& w);
  // The window put() or add() fills with unit u: its stored values are read
  // first when `keep`, else it starts zero.
  absl::StatusOr<char*> filling(int u, bool keep);
  absl::Status write_current();

  std::vector<int64_t> chunks_, offsets_;  // elements, and each unit's offset in the shard
  std::vector<uint64_t> records_;          // each unit's record offset in the file or host memory
  int64_t window_numel_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<Window> small_, large_;
  Buffer host_;                    // device cpu: the records, where this store made them
  char* host_records_ = nullptr;   // device cpu: the records (a writer's are its store's)
  std::shared_ptr<AioEngine> io_;  // device nvme, shared with a writer
  Tier window_tier_ = Tier::kHost;
  int file_ = -1;
  MemoryAccountant* acct_ = nullptr;
  uint64_t nvme_reserved_ = 0;
  Category category_ = Category::kParams;
  // The unit being filled by put(), and the next window of each pool to fill.
  Window* filling_ = nullptr;
  size_t next_small_ = 0;
};

}  // namespace zerod
