#include "runtime/core/crc32c.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace zerod {
namespace {

// Bit by bit from the polynomial's definition, no tables.
uint32_t naive_crc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
  }
  return ~c;
}

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);  // the standard check value
  // iSCSI test patterns (RFC 3720, B.4).
  uint8_t b[32];
  std::memset(b, 0, 32);
  EXPECT_EQ(crc32c(b, 32), 0x8a9136aau);
  std::memset(b, 0xff, 32);
  EXPECT_EQ(crc32c(b, 32), 0x62a8ab43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(b, 32), 0x46dd794eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc32c(b, 32), 0x113fdb5cu);
  EXPECT_EQ(crc32c(b, 0), 0u);
}

TEST(Crc32c, EveryLengthAndOffsetMatchesTheBitwiseDefinition) {
  std::mt19937 rng(5);
  std::vector<uint8_t> data(300);
  for (auto& x : data) x = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 9; ++off) {
    for (size_t n = 0; off + n <= data.size(); n += 7) {
      ASSERT_EQ(crc32c(data.data() + off, n), naive_crc32c(data.data() + off, n)) << off << " " << n;
    }
  }
}

TEST(Crc32c, ContinuesAcrossPieces) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t cut : {0, 1, 8, 13, 500, 999, 1000}) {
    const uint32_t first = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, first), crc32c(data.data(), data.size())) << cut;
  }
}

}  // namespace
}  // namespace zerod
