// CRC-32C (Castagnoli, the iSCSI polynomial), as checkpoints record for
// every file. Written here rather than taken from a library: the GPU
// machines build from the source tree alone, and Debian has no CRC-32C
// development package that every one of our machines carries.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerod {

// The CRC of data[0, n), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace zerod
