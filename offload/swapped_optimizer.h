// The optimizer step with its states on a file (offload_optimizer nvme).
// The owned pieces are cut into sub-groups of at most `sub_group_size`
// elements, a new one begun at each unit's first piece; each sub-group's
// record (the fp32 master weights when they are not the working parameters,
// then the optimizer states) lies at its own offset of one scratch file. A
// step streams the records through `buffer_count` host buffers: while
// sub-group i is updated on the CPU, sub-group i+1 is being read and earlier
// ones written back. Host memory is those buffers, whatever the model's
// size. The results are bitwise those of the in-memory optimizer: pieces are
// split only at multiples of the 8-bit block, and every update is
// elementwise, so neither the cut nor the order of the sub-groups matters.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/core/memory_plan.h"
#include "runtime/optim/optimizer.h"

namespace zerod {

struct SwapSettings {
  std::string file;        // created, and unlinked at once
  int64_t sub_group_size;  // elements
  int buffer_count;
  Tier buffer_tier;  // pinned with a GPU, host otherwise
  AioConfig aio;
  IoFaultHook hook;  // tests only
  // The gradients are not in memory: step() is given them sub-group by
  // sub-group, into room after each record in its buffer.
  bool grads_streamed = false;
  // Pieces that begin a sub-group (each unit's first), ascending: a unit's
  // pieces are then whole sub-groups, updated as soon as its gradients are
  // (step_pieces).
  std::vector<int> group_starts = {};
  // Each record has a second place in the file (the file twice the size),
  // so that updates by pieces can be undone (allow_undo()).
  bool undoable = false;
  MemoryAccountant* accountant = &MemoryAccountant::global();  // of the buffers and the file
};

class SwappedOptimizer {
 public:
  // Fills dst with elements [start, start + n) of piece k's initial masters
  // (or of its gradients). A failure stops what called it, which returns it.
  using Fill = std::function<absl::Status(int k, int64_t start, int64_t n, float* dst)>;
  // Sees elements [start, start + n) of piece k's masters just updated.
  using MasterOut = std::function<absl::Status(int k, int64_t start, int64_t n, const float* master)>;
  // With an init_master the fp32 master weights live in the file too, and the
  // pieces' `master` pointers are not used; without, the masters stay where
  // they are and are updated in place, and only the states are swapped.
  // The updates run on `host`'s compute stream through its table
  // `kernels`: the buffers are host memory. Both outlive the optimizer.
  static absl::StatusOr<std::unique_ptr<SwappedOptimizer>> create(const OptimizerConfig& cfg,
                                                                  std::vector<ParamPiece> pieces, DType param16_type,
                                                                  const Fill& init_master, const SwapSettings& s,
                                                                  Device& host, Kernels& kernels);
  // Bytes the file will take, for checking the disk before anything is
  // allocated (the pieces' pointers are not used).
  static uint64_t file_bytes(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces, DType param16_type,
                             bool swap_master, int64_t sub_group_size, const std::vector<int>& group_starts,
                             bool undoable);
  // What create() allocates, by Buffers: the buffers a step streams the
  // groups through (the largest record, and its gradients when streamed),
  // and the file's space.
  enum Buffers { kGroupBuffers, kFile };
  static std::vector<BufferSpec> buffers(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces,
                                         DType param16_type, bool swap_master, const SwapSettings& s);

  ~SwappedOptimizer();

  // With grads_streamed, `grads` gives each sub-group's gradients before its
  // update. `updated`, if given, sees every piece's new masters in order,
  // while they are in their buffer.
  absl::Status step(float lr, int64_t step, float grad_scale, const Fill& grads = {}, const MasterOut& updated = {});
  // The update of pieces [first, last) only, which begin and end at group
  // starts: for a unit whose gradients backward has just completed. Their
  // records go back to the file in the background, and the first sub-group
  // of the unit before (the next one backward completes) is read ahead;
  // settle() waits for those transfers. With `undoable` the records go to
  // their other place, and the ones they were read from stay until commit()
  // or undo().
  absl::Status step_pieces(float lr, int64_t step, float grad_scale, int first, int last, const Fill& grads,
                           const MasterOut& updated, bool undoable = false);
  // Whether undoable updates can be made: created `undoable`, with the
  // masters in the file (masters updated in place could not be put back).
  absl::Status allow_undo() const;
  // The records of undoable updates stand; the first failure of a write
  // still in flight.
  absl::Status commit();
  // Their groups keep the records they were read from; `restored` sees
  // those groups' masters, in order.
  absl::Status undo(const MasterOut& restored);
  // Every transfer in flight done; the first failure among them.
  absl::Status settle();
  // Every piece's master weights, in order, part by part (from the file
  // when swapped).
  absl::Status read_masters(const MasterOut& out);
  // And from src[k] (into the file when swapped).
  absl::Status write_masters(const std::vector<const float*>& src);

  // The state arrays an in-memory Optimizer over the same pieces would hold
  // (names, types and sizes; data null). Each is the sub-groups' arrays of
  // that name one after another, so read_state/write_state move the same
  // bytes that Optimizer::state_arrays() shows, through the buffers.
  std::vector<StateArray> state_layout() const { return whole_->state_arrays(); }
  // Gives the array's bytes to `out` in order, part by part.
  absl::Status read_state(const std::string& name, const std::function<absl::Status(const void*, size_t)>& out);
  // Sets the array: `in(dst, offset, n)` fills dst with its bytes [offset, offset + n).
  absl::Status write_state(const std::string& name,
                           const std::function<absl::Status(void* dst, uint64_t offset, uint64_t n)>& in);

  int num_sub_groups() const { return static_cast<int>(groups_.size()); }
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  struct SubGroup {
    std::vector<ParamPiece> pieces;  // masters in the group's buffer when swapped
    std::vector<int> source;         // the caller's piece each one was cut from
    std::vector<int64_t> start;      // and where in it it starts
    std::unique_ptr<Optimizer> opt;  // states bound to the group's buffer
    uint64_t offset = 0, bytes = 0;  // record in the file (bytes padded for direct I/O)
  };
  // A buffer: the group it holds (or is reading, or writing back), and that
  // transfer.
  struct Slot {
    Buffer buf;
    int group = -1;
    AioEngine::Ticket io;
  };
  static std::vector<SubGroup> plan_groups(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces,
                                           DType param16_type, bool swap_master, int64_t sub_group_size,
                                           const std::vector<int>& group_starts);
  static std::vector<BufferSpec> buffers_for(const std::vector<SubGroup>& groups, const SwapSettings& s);
  SwappedOptimizer() = default;
  // Group g's buffer is fixed: its pieces and states point into it.
  Slot& slot_of(int g) { return slots_[g % slots_.size()]; }
  char* buffer_of(int g) { return slot_of(g).buf.host<char>(); }
  // Waits for s's transfer; a failed one leaves s holding nothing.
  absl::Status finish(Slot& s);
  // Makes g's buffer g's once what is in flight there ends, and starts
  // reading g's record into it when `read` (unless it holds g already).
  absl::Status claim(int g, bool read);
  // claim(), and the read waited for.
  absl::Status ready(int g, bool read);
  // Reads h ahead while g is in use, where their buffers differ.
  absl::Status read_ahead(int h, int g);
  // Group g's record at its place (the other one when `spare`).
  uint64_t record_offset(int g, bool spare) const;
  void write_back(int g, bool spare = false);
  // Visits `groups` in order, each in its buffer: read from the file first
  // when `read`, fn(g), then written back when `write_back`. fn(g) runs while
  // the next group's read and earlier groups' write-backs are in flight.
  absl::Status visit(const std::vector<int>& groups, bool read, bool write_back,
                     const std::function<absl::Status(int)>& fn);
  // visit() of every group.
  absl::Status stream(bool read, bool write_back, const std::function<absl::Status(int)>& fn);
  // Group g's masters, in its buffer, to `out` piece by piece.
  absl::Status masters_out(int g, const MasterOut& out);
  // Group g's update, its gradients from `grads` when given, in its buffer.
  absl::Status update(int g, float lr, int64_t step, float grad_scale, const Fill& grads, const MasterOut& updated);

  // The byte range of each group's array `name`, in order, as fn(data,
  // offset, bytes); the first error fn returns ends the calls and is returned.
  absl::Status each_part(const std::string& name, bool write_back,
                         const std::function<absl::Status(void* data, uint64_t offset, uint64_t bytes)>& fn);

  bool swap_master_ = false;
  std::unique_ptr<Optimizer> whole_;  // unbound: the layout of the states over all pieces
  std::vector<SubGroup> groups_;
  std::vector<int> group_starts_;
  std::vector<int> first_group_;  // per piece (and one past the last): the first group holding part of it
  std::vector<Slot> slots_;
  uint64_t records_bytes_ = 0;  // one place of every record
  bool undoable_ = false;
  std::vector<bool> placed_second_;  // per group: its record is at its second place
  std::vector<bool> spare_written_;  // per group: updated undoably, to the other place
  uint64_t file_bytes_ = 0;
  MemoryAccountant* acct_ = nullptr;
  uint64_t nvme_reserved_ = 0;  // recorded with acct_
  Device* host_ = nullptr;
  Kernels* kernels_ = nullptr;
  std::unique_ptr<AioEngine> io_;
  int file_ = -1;
};

}  // namespace zerod
