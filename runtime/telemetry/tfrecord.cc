#include "runtime/telemetry/tfrecord.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/core/crc32c.h"

namespace zerod {
namespace {

constexpr uint32_t kMaskDelta = 0xa282ead8u;
constexpr size_t kHeader = 12, kFooter = 4;  // length and its CRC; the data's CRC

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(kHeader + data.size() + kFooter);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out.append(data);
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

TfRecords read_tfrecords(std::string_view bytes) {
  TfRecords r;
  uint64_t at = 0;
  while (at < bytes.size()) {
    const char* p = bytes.data() + at;
    const uint64_t left = bytes.size() - at;
    if (left < kHeader) {
      r.problem = absl::StrCat("a record at byte ", at, " is cut short in its length");
      break;
    }
    if (get_le(p + 8, 4) != masked_crc32c(p, 8)) {
      r.problem = absl::StrCat("the length of the record at byte ", at, " fails its CRC");
      break;
    }
    const uint64_t n = get_le(p, 8);
    if (n > left - kHeader || left - kHeader - n < kFooter) {
      r.problem = absl::StrCat("the record at byte ", at, " is cut short (", n, " bytes of data)");
      break;
    }
    if (get_le(p + kHeader + n, 4) != masked_crc32c(p + kHeader, n)) {
      r.problem = absl::StrCat("the data of the record at byte ", at, " fails its CRC");
      break;
    }
    r.records.emplace_back(p + kHeader, n);
    at += kHeader + n + kFooter;
    r.ends.push_back(at);
  }
  return r;
}

}  // namespace zerod
