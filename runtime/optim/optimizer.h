// The optimizer over the pieces of parameters one rank owns (a tensor, or
// its part of a ZeRO shard): Adam / AdamW with fp32 states, or AdamW8bit
// with 8-bit blockwise states for every piece of a tensor of at least
// kMin8bitNumel elements (smaller tensors keep fp32 states). States are
// allocated under the accountant's optimizer category.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/optim/optim_config.h"
#include "runtime/core/memory.h"
#include "runtime/kernels/kernels.h"

namespace zerod {

struct ParamPiece {
  float* master;            // fp32 master weights, updated in place
  const float* grad;        // fp32 gradients, scaled by step()'s grad_scale
  void* param16 = nullptr;  // 16-bit working copy written in the same pass, if any
  int64_t numel = 0;
  int64_t tensor_numel = 0;  // of the whole tensor this piece belongs to
  bool decay = true;         // weight decay applies
};

// A named array of optimizer state: a view into the optimizer.
struct StateArray {
  const char* name;
  DType dtype;
  void* data;
  int64_t numel;
};

class Optimizer {
 public:
  // `param16_type` is the type of every piece's param16 (bf16 or fp16). The
  // states are allocated in d's memory and zeroed on its compute stream.
  static absl::StatusOr<std::unique_ptr<Optimizer>> create(const OptimizerConfig& cfg, std::vector<ParamPiece> pieces,
                                                           DType param16_type, Device& d);
  // The same optimizer with its states in memory the caller provides: bind()
  // must give it state_bytes() before any other use (the offload tiers move
  // states between a file and a few such buffers).
  static std::unique_ptr<Optimizer> create_unbound(const OptimizerConfig& cfg, std::vector<ParamPiece> pieces,
                                                   DType param16_type);
  uint64_t state_bytes() const;
  // `storage` holds the states from now on (its contents are taken as they are).
  void bind(void* storage);
  // Zero states, as a fresh optimizer starts from, set on d's stream s (the
  // states are d's memory).
  void zero_states(Device& d, Stream& s);

  // One update, `step` being the 1-based update count: each piece's op of
  // the kernel table enqueued on s, so the masters, states and param16 are
  // read once s has run them. The pieces' memory is the table's device's.
  // Pieces [first, last) only (last -1: to the end), for an update that
  // runs piece by piece as gradients arrive. With grad_scale_at, the factor
  // is read from there (k's device's memory) when the update runs, in
  // place of grad_scale (AdamStep::grad_scale_at).
  void step(Kernels& k, Stream& s, float lr, int64_t step, float grad_scale, int first = 0, int last = -1,
            const float* grad_scale_at = nullptr);

  const AdamHyper& hyper() const { return hyper_; }
  // Pieces that keep 8-bit states.
  int64_t quantized_numel() const { return quantized_numel_; }
  // Every state, for checkpoints: fp32 "m" and "v" of the pieces that keep
  // fp32 states, then the 8-bit "m_codes", "v_codes", "m_absmax" and
  // "v_absmax"; arrays of no elements are left out. Pieces follow the order
  // given to create(), so the arrays fit an optimizer built over the same
  // pieces. Before bind(), the arrays' data is null.
  std::vector<StateArray> state_arrays();

  // Where piece k's states lie in state_arrays(): its elements from `state`
  // in "m" and "v" (in "m_codes" and "v_codes" when quantized), and its
  // blocks from `block` in "m_absmax" and "v_absmax". Blocks start at the
  // piece's first element.
  struct PieceStates {
    bool quantized;
    int64_t state, block;
  };
  PieceStates piece_states(int k) const;
  // Piece k's states as byte ranges of the memory bind() was given: its m
  // and v (codes and absmax values when quantized), for copying it aside.
  struct ByteRange {
    uint64_t offset, bytes;
  };
  std::vector<ByteRange> piece_state_ranges(int k) const;
  // Sets piece k's states from fp32 m and v (quantized as an update would).
  void set_piece_states(int k, const float* m, const float* v);

  // For an update over copies of a piece's memory on another device
  // (shard/device_steps.h): elements [start, start + n) of piece k as the
  // arrays an update reads and writes, where they are bound: its masters,
  // then fp32 m and v, or the m and v absmax values and then codes (start
  // a multiple of kQuantBlock where it is quantized).
  struct Span {
    void* data;
    uint64_t bytes;
  };
  std::vector<Span> part_arrays(int k, int64_t start, int64_t n) const;
  // The update of those elements enqueued on s with k's table, over copies
  // of part_arrays at `at` (in its order), with gradients `grad` and the
  // working copy written to `param16` (may be null): bitwise the update of
  // those elements by step().
  void step_part(Kernels& kern, Stream& s, int k, int64_t n, const std::vector<void*>& at, const float* grad,
                 void* param16, float lr, int64_t step, float grad_scale) const;

 private:
  struct Piece {
    ParamPiece p;
    bool quantized;
    int64_t state;  // offset of its m (and v) in states_ or codes_
    int64_t block;  // offset of its absmax values (quantized only)
  };
  Optimizer() = default;
  // A piece with its states, as the kernels take it.
  Adam8bitTensor quantized_view(const Piece& pc) const;
  AdamTensor fp32_view(const Piece& pc) const;

  AdamHyper hyper_;
  DType param16_type_ = DType::kBF16;
  std::vector<Piece> pieces_;
  int64_t fp32_numel_ = 0, quantized_numel_ = 0, blocks_ = 0;
  Buffer own_;  // the states, unless the caller binds its own memory
  // In one block of state_bytes(), floats first: fp32 m of every piece, then
  // v; 8-bit m absmax per block, then v; m codes, then v codes.
  float* states_ = nullptr;
  float* absmax_ = nullptr;
  uint8_t* codes_ = nullptr;
};

}  // namespace zerod
