// Seeded draws that give the same numbers with every standard library
// (std::uniform_int_distribution and std::shuffle do not), so that a seed
// means the same data order and synthetic task everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>

namespace zerod {

// Uniform in [0, n), n > 0. Rejecting the lowest 2^64 mod n raw values leaves
// a range that is a multiple of n, so the modulo is unbiased; unlike
// std::uniform_int_distribution the result is the same on every library.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t reject_below = (0 - n) % n;
  uint64_t x;
  do x = rng();
  while (x < reject_below);
  return x % n;
}

// Fisher–Yates with uniform_below, for the same portability reason.
template <typename T>
void portable_shuffle(T* v, size_t n, std::mt19937_64& rng) {
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[uniform_below(rng, i)]);
}

}  // namespace zerod
