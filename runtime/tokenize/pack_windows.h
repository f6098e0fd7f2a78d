// Packing documents into windows (zeroctl tokenize --pack): first-fit
// decreasing. Documents are taken longest first (equal lengths in input
// order), each into the first window, in the order windows were opened,
// with room for it, else into a new one. Before: every length is in
// [1, window]. After: every document is in exactly one window, in no
// window are more than `window` ids, and a window lists its documents in
// the order they were placed.
#pragma once

#include <cstdint>
#include <vector>

namespace zerod {

// Each window's documents, as indices into `lengths`; O(n log n) in the
// documents, a segment tree over the windows' free space finding the first.
std::vector<std::vector<int64_t>> pack_windows(const std::vector<int>& lengths, int window);

}  // namespace zerod
