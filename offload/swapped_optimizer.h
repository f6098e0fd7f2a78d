// The optimizer step with its states on a file (offload_optimizer nvme).
// The owned pieces are cut into sub-groups of at most `sub_group_size`
// elements; each sub-group's record (the fp32 master weights when they are
// not the working parameters, then the optimizer states) lies at its own
// offset of one scratch file. A step streams the records through
// `buffer_count` host buffers: while sub-group i is updated on the CPU,
// sub-group i+1 is being read and earlier ones written back. Host memory is
// those buffers, whatever the model's size. The results are bitwise those of
// the in-memory optimizer: pieces are split only at multiples of the 8-bit
// block, and every update is elementwise.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offload/aio_engine.h"
#include "runtime/optim/optimizer.h"

namespace zerod {

struct SwapSettings {
  std::string file;        // created, and unlinked at once
  int64_t sub_group_size;  // elements
  int buffer_count;
  Tier buffer_tier;        // pinned with a GPU, host otherwise
  AioConfig aio;
  IoFaultHook hook;        // tests only
  // The gradients are not in memory: step() is given them sub-group by
  // sub-group, into room after each record in its buffer.
  bool grads_streamed = false;
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
                             bool swap_master, int64_t sub_group_size);

  ~SwappedOptimizer();

  // With grads_streamed, `grads` gives each sub-group's gradients before its
  // update. `updated`, if given, sees every piece's new masters in order,
  // while they are in their buffer.
  absl::Status step(float lr, int64_t step, float grad_scale, const Fill& grads = {},
                    const MasterOut& updated = {});
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
  static std::vector<SubGroup> plan(const OptimizerConfig& cfg, const std::vector<ParamPiece>& pieces,
                                    DType param16_type, bool swap_master, int64_t sub_group_size);
  SwappedOptimizer() = default;
  char* buffer_of(int g) { return buffers_[g % buffers_.size()].host<char>(); }
  // Visits every group in order in its buffer: read from the file first
  // when `read`, fn(g), then written back when `write_back`. fn(g) runs while
  // the next group's read and earlier groups' write-backs are in flight.
  absl::Status stream(bool read, bool write_back, const std::function<absl::Status(int)>& fn);

  // The byte range of each group's array `name`, in order, as fn(data,
  // offset, bytes); the first error fn returns ends the calls and is returned.
  absl::Status each_part(const std::string& name, bool write_back,
                         const std::function<absl::Status(void* data, uint64_t offset, uint64_t bytes)>& fn);

  bool swap_master_ = false;
  std::unique_ptr<Optimizer> whole_;  // unbound: the layout of the states over all pieces
  std::vector<SubGroup> groups_;
  std::vector<Buffer> buffers_;
  uint64_t file_bytes_ = 0;
  MemoryAccountant* acct_ = nullptr;
  uint64_t nvme_reserved_ = 0;  // recorded with acct_
  Device* host_ = nullptr;
  Kernels* kernels_ = nullptr;
  std::unique_ptr<AioEngine> io_;
  int file_ = -1;
};

}  // namespace zerod
