#include "runtime/core/memory_plan.h"

#include <algorithm>

#include "runtime/core/caching_allocator.h"

namespace zerod {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kBuild:
      return "build";
    case Phase::kFrozenWeights:
      return "frozen weights";
    case Phase::kResume:
      return "resume";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kTraining:
      return "training";
    case Phase::kEvaluation:
      return "evaluation";
  }
  return "?";
}

void MemoryPlan::add(std::string what, Tier t, Category c, uint64_t bytes, Phase from, bool kept, int64_t count) {
  if (count <= 0) return;
  // The accountant records a GPU block at its size, not the request's.
  if (t == Tier::kGpu && device_.caches_blocks) bytes = CachingAllocator::block_size(bytes);
  buffers_.push_back({std::move(what), t, c, count, bytes * static_cast<uint64_t>(count), from, kept});
}

MemoryPeaks MemoryPlan::held(Phase p) const {
  MemoryPeaks h;
  for (const PlannedBuffer& b : buffers_) {
    if (b.from == p || (b.from < p && b.kept)) {
      h.peak[static_cast<int>(b.tier)][static_cast<int>(b.category)] += b.bytes;
      h.total[static_cast<int>(b.tier)] += b.bytes;
    }
  }
  return h;
}

MemoryPeaks MemoryPlan::peaks() const {
  MemoryPeaks out;
  for (int p = 0; p < kNumPhases; ++p) {
    const MemoryPeaks h = held(static_cast<Phase>(p));
    for (int t = 0; t < kNumTiers; ++t) {
      out.total[t] = std::max(out.total[t], h.total[t]);
      for (int c = 0; c < kNumCategories; ++c) out.peak[t][c] = std::max(out.peak[t][c], h.peak[t][c]);
    }
  }
  return out;
}

}  // namespace zerod
