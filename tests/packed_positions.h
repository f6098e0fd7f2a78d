// Packed sequences' positions for the attention tests: documents of the
// lengths in `cycle`, in turn (sequence b starting at the b-th), laid into
// B sequences of T, a document cut at a sequence's end.
#pragma once

#include <cstdint>
#include <vector>

namespace zerod::testing {

inline std::vector<int32_t> packed_positions(int B, int T, const std::vector<int>& cycle) {
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    size_t d = b;
    for (int t = 0, i = 0; t < T; ++t, ++i) {
      if (i == cycle[d % cycle.size()]) i = 0, ++d;
      pos.push_back(i);
    }
  }
  return pos;
}

}  // namespace zerod::testing
