// What a rank will allocate, known before anything is: each buffer's tier,
// category and bytes, and when in the run it is held. The engine's parts
// describe their buffers once (BufferSpec) and both state them here and
// allocate from that description, so the plan's peaks are the accountant's
// (memory.h) of a real run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/memory.h"

namespace zerod {

// The parts of a run, in the order they come. A buffer is held from the
// phase that allocates it until that phase ends, or to the end of the run
// when it is kept (a buffer made at the first checkpoint and reused by the
// later ones).
// kFrozenWeights: LoRA's frozen weights, built after the rest, whose
// buffers of initial values never coexist with the build's own.
enum class Phase : uint8_t { kBuild, kFrozenWeights, kResume, kCheckpoint, kTraining, kEvaluation };
inline constexpr int kNumPhases = 6;
const char* phase_name(Phase p);

struct PlannedBuffer {
  std::string what;
  Tier tier;
  Category category;
  int64_t count;   // buffers of one size
  uint64_t bytes;  // all of them, as the accountant records them (GPU blocks rounded up)
  Phase from;
  bool kept;  // held to the end of the run, not only during `from`
};

// A buffer of a part, described once: the part's plan states this entry and
// its allocation allocates from it, so the plan cannot drift from what is
// allocated. A part's description is a vector indexed by the part's own
// enum of its buffers; one that this configuration does not need has
// count 0.
struct BufferSpec {
  std::string what;
  Category category;
  uint64_t bytes;                           // each
  int count = 1;                            // buffers of this size
  std::optional<Tier> tier = std::nullopt;  // none: the device's own memory (kNvme: space in a file)
  bool kept = true;                         // held to the end of the run, not only during the phase that allocates it
};

// The device a plan is made for: what decides where buffers go and how a
// GPU's allocator rounds them.
struct PlanDevice {
  Tier memory = Tier::kHost;  // of its own buffers: kHost for a CPU, kGpu for a GPU
  // Host buffers the GPU copies to and from are pinned (a CUDA GPU's;
  // a CPU device that stands in for a GPU has none).
  bool pins = false;
  // GPU blocks come from the caching allocator, which rounds them up.
  bool caches_blocks = false;
  // What its own memory holds for this process (free, and under the
  // accountant's limit); 0: not known.
  uint64_t usable_bytes = 0;
  // The host memory of its node where a described machine's (zeroctl
  // estimate --host-memory); 0: this machine's.
  uint64_t host_memory = 0;

  bool host_visible() const { return memory != Tier::kGpu; }
  Tier staging_tier() const { return pins ? Tier::kPinned : Tier::kHost; }
};

class MemoryPlan {
 public:
  explicit MemoryPlan(PlanDevice device = {}) : device_(device) {}
  const PlanDevice& device() const { return device_; }

  // `count` buffers of `bytes` each, held during `from` (to the end with `kept`).
  void add(std::string what, Tier t, Category c, uint64_t bytes, Phase from = Phase::kBuild, bool kept = true,
           int64_t count = 1);
  // A part's buffers, as described.
  void add(const BufferSpec& b, Phase from = Phase::kBuild) {
    add(b.what, b.tier.value_or(device_.memory), b.category, b.bytes, from, b.kept, b.count);
  }
  void add(const std::vector<BufferSpec>& part, Phase from = Phase::kBuild) {
    for (const BufferSpec& b : part) add(b, from);
  }

  const std::vector<PlannedBuffer>& buffers() const { return buffers_; }
  // The peak of each (tier, category) and of each tier's sum over the run:
  // the largest over phases of what is held then.
  MemoryPeaks peaks() const;
  // What is held during phase p.
  MemoryPeaks held(Phase p) const;

 private:
  PlanDevice device_;
  std::vector<PlannedBuffer> buffers_;
};

}  // namespace zerod
