// TFRecord framing, as TensorBoard's event files use it: a record is its
// length (u64, little-endian), the masked CRC-32C of those 8 bytes, the
// data, and the masked CRC-32C of the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zerod {

// The CRC-32C of data[0, n), rotated right by 15 bits and offset, as
// TFRecord stores it (a CRC of data holding CRCs is then no CRC itself).
uint32_t masked_crc32c(const void* data, size_t n);

// `data` framed as one record.
std::string tfrecord(std::string_view data);

// The records of `bytes` from its start, up to the first that is torn or
// fails a CRC (a writer cut short leaves such a tail).
struct TfRecords {
  std::vector<std::string_view> records;  // into `bytes`
  std::vector<uint64_t> ends;             // where each record ends
  std::string problem;                    // why reading stopped before the end; "" when it did not
};
TfRecords read_tfrecords(std::string_view bytes);

}  // namespace zerod
