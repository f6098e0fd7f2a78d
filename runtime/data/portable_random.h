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

// Draw `index` of `seed`, uniform in [0, 1) to 53 bits: splitmix64 of the
// two, needing no state, so that any draw of a walk can be made alone.
inline double indexed_draw(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

}  // namespace zerod
