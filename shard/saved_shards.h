// A rank's shard file in a checkpoint, and reading a saved run's shard files
// by flat parameter range whatever partition they were written under: what
// resuming at another world size or ZeRO stage, and exporting the whole
// model, read.
//
// A shard file (safetensors) holds, in order, "master": the fp32 master
// weights of the rank's owned segments back to back, then the optimizer's
// state arrays (Optimizer::state_arrays()) over the same segments.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/optim/optimizer.h"
#include "shard/partition.h"
#include "shard/zero_config.h"

namespace zerod {

inline constexpr const char* kMasterArray = "master";

// The optimizer's pieces for owned segments: sizes and decay, no memory.
std::vector<ParamPiece> piece_shapes(const std::vector<ShardSegment>& owned);
int64_t owned_numel(const std::vector<ShardSegment>& owned);

// The arrays of a shard file over `owned_numel` elements with these states.
std::vector<SafeTensor> shard_file_arrays(int64_t owned_numel, const std::vector<StateArray>& states);
// OK when r holds exactly `want` (names, dtypes, sizes); otherwise an error
// naming the file and the first array that differs.
absl::Status check_shard_file(const SafetensorsReader& r, const std::vector<SafeTensor>& want);

class SavedShards {
 public:
  // files[r] is the shard file of rank r of a partition of layout among
  // files.size() ranks (one under stage 0), written with optimizer `opt`.
  // Files are opened and checked when first read from, through `faults`
  // (tests), which outlives this.
  SavedShards(const GptLayout& layout, const OptimizerConfig& opt, std::vector<std::string> files,
              const IoFaultHook* faults = nullptr);
  ~SavedShards();

  // Flat elements [begin, end) of the fp32 master weights, and of Adam's m
  // and v (8-bit states dequantized), into whichever of the outputs are not
  // null. Only the byte ranges that hold them are read.
  absl::Status read(int64_t begin, int64_t end, float* master, float* m, float* v);

 private:
  struct Segment {  // a saved rank's owned segment
    int64_t flat_offset, numel;
    int rank, piece;
    int64_t array_offset;  // in that rank's master array
  };
  struct Rank {
    std::string path;
    std::unique_ptr<Optimizer> layout;  // unbound: where its pieces' states lie
    int64_t owned_numel = 0;
    std::optional<SafetensorsReader> reader;
  };
  absl::StatusOr<const SafetensorsReader*> open(int rank);
  // Elements [e0, e1) of the state `which` ("m" or "v") of a saved piece.
  absl::Status read_state(const Segment& s, const char* which, int64_t e0, int64_t e1, float* out);

  const IoFaultHook* faults_;
  std::vector<Segment> segments_;  // by flat offset, covering the model
  std::vector<Rank> ranks_;
};

}  // namespace zerod
