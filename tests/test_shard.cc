// Partition arithmetic against a per-element check: for unit sizes and world
// sizes that do not divide evenly, every element has exactly one owner,
// chunks are equal and aligned, and padding sits only at each unit's end.
#include <gtest/gtest.h>

#include <vector>

#include "shard/partition.h"

namespace zerod {
namespace {

std::vector<int64_t> begins(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> b = {0};
  for (int64_t s : sizes) b.push_back(b.back() + s);
  return b;
}

TEST(Partition, EveryElementHasExactlyOneOwnerAndPaddingOnlyAtUnitEnds) {
  const std::vector<std::vector<int64_t>> unit_sets = {
      {1}, {63}, {64}, {65}, {1000, 7, 129}, {4096, 1, 1, 300}, {2, 3, 5, 7, 11, 13}};
  for (const auto& sizes : unit_sets) {
    for (int world = 1; world <= 7; ++world) {
      SCOPED_TRACE(::testing::Message() << sizes.size() << " units from " << sizes[0] << ", world " << world);
      const Partition p(begins(sizes), world);
      ASSERT_EQ(p.num_units(), static_cast<int>(sizes.size()));
      int64_t shard = 0, padded = 0;
      for (int u = 0; u < p.num_units(); ++u) {
        const int64_t chunk = p.chunk(u);
        ASSERT_EQ(chunk % Partition::kAlign, 0);
        ASSERT_GE(chunk * world, sizes[u]);                      // covers the unit
        ASSERT_LT(chunk * world - sizes[u], (Partition::kAlign + 1) * world);  // pads little
        ASSERT_EQ(p.shard_offset(u), shard);
        ASSERT_EQ(p.padded_offset(u), padded);
        // Ownership element by element: ranks in order, contiguous, the
        // real elements first and the padding after them.
        std::vector<int> owners(sizes[u], 0);
        int64_t next = p.unit_begin(u);
        bool padding_seen = false;
        for (int r = 0; r < world; ++r) {
          const Partition::Range range = p.owned(u, r);
          ASSERT_LE(range.begin, range.end);
          ASSERT_LE(range.end - range.begin, chunk);
          if (range.begin == range.end) {
            padding_seen = true;
            continue;
          }
          ASSERT_FALSE(padding_seen) << "a rank after padding owns elements";
          ASSERT_EQ(range.begin, next);
          for (int64_t i = range.begin; i < range.end; ++i) ++owners[i - p.unit_begin(u)];
          next = range.end;
          if (range.end - range.begin < chunk) padding_seen = true;
        }
        ASSERT_EQ(next, p.unit_begin(u) + sizes[u]);
        for (int64_t i = 0; i < sizes[u]; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
        shard += chunk;
        padded += chunk * world;
      }
      EXPECT_EQ(p.shard_numel(), shard);
      EXPECT_EQ(p.padded_numel(), padded);
    }
  }
}

TEST(Partition, OwnedSegmentsCoverTheModelOnceWithTheirShardPlaces) {
  const GptLayout layout(GptConfig{3, 2, 16, 50, 8});
  for (int world = 1; world <= 5; ++world) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    const Partition p(layout, world);
    std::vector<int> owners(layout.num_params(), 0);
    for (int r = 0; r < world; ++r) {
      for (const ShardSegment& s : owned_segments(layout, p, r)) {
        const int u = [&] {
          for (int v = 0; v < layout.num_units(); ++v) {
            if (s.flat_offset < layout.unit_begin(v) + layout.unit_numel(v)) return v;
          }
          return -1;
        }();
        ASSERT_GE(u, 0);
        // The shard place is the element's position inside the rank's chunk.
        EXPECT_EQ(s.shard_offset - p.shard_offset(u), s.flat_offset - layout.unit_begin(u) - r * p.chunk(u));
        for (int64_t i = 0; i < s.numel; ++i) ++owners[s.flat_offset + i];
      }
    }
    for (int64_t i = 0; i < layout.num_params(); ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
  }
}

}  // namespace
}  // namespace zerod
