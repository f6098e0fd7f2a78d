#include "runtime/tokenize/pack_windows.h"

#include <algorithm>
#include <numeric>

namespace zerod {
namespace {

// The free space of `n` windows, all empty at first (n documents never
// open more), and the first one with at least a given room: a max segment
// tree, each node the most room among its leaves.
class FreeSpace {
 public:
  FreeSpace(int64_t n, int window) {
    while (leaves_ < n) leaves_ *= 2;
    room_.assign(2 * leaves_, 0);
    std::fill(room_.begin() + leaves_, room_.begin() + leaves_ + n, window);
    for (int64_t i = leaves_ - 1; i >= 1; --i) room_[i] = std::max(room_[2 * i], room_[2 * i + 1]);
  }
  // The first window with `need` ids free; one has (see above).
  int64_t first_with(int need) const {
    int64_t i = 1;
    while (i < leaves_) i = room_[2 * i] >= need ? 2 * i : 2 * i + 1;
    return i - leaves_;
  }
  void take(int64_t w, int ids) {
    int64_t i = w + leaves_;
    room_[i] -= ids;
    for (i /= 2; i >= 1; i /= 2) room_[i] = std::max(room_[2 * i], room_[2 * i + 1]);
  }

 private:
  int64_t leaves_ = 1;
  std::vector<int> room_;
};

}  // namespace

std::vector<std::vector<int64_t>> pack_windows(const std::vector<int>& lengths, int window) {
  const auto n = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  FreeSpace space(n, window);
  std::vector<std::vector<int64_t>> windows;
  for (const int64_t d : order) {
    const int64_t w = space.first_with(lengths[d]);
    space.take(w, lengths[d]);
    if (w == static_cast<int64_t>(windows.size())) windows.emplace_back();  // the first window not yet opened
    windows[w].push_back(d);
  }
  return windows;
}

}  // namespace zerod
