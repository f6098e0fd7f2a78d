// The safetensors file format: a little-endian u64 header length N, N bytes
// of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}}, and an
// optional "__metadata__" of strings), then the tensors' bytes, offsets
// counted from the end of the header. Used to import and export Hugging
// Face GPT-2 weights.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/io_faults.h"
#include "runtime/core/status.h"

namespace zerod {

struct SafeTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section

  int64_t numel() const;
};

// A file opened and its header checked whole: known dtypes (F32, BF16, F16,
// I8, U8), sizes that match the shapes, and data ranges that tile the data
// section exactly (sorted, no gap, no overlap). Tensors are read on demand.
class SafetensorsReader {
 public:
  // Errors opening or reading keep errno's kind; `faults` (tests) sees the
  // open and each read's result, and outlives the reader.
  static absl::StatusOr<SafetensorsReader> open(const std::string& path, const IoFaultHook* faults = nullptr);
  SafetensorsReader(SafetensorsReader&& o) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& o) noexcept;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  const std::vector<SafeTensor>& tensors() const { return tensors_; }  // by offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when the file has no tensor of that name.
  const SafeTensor* find(const std::string& name) const;
  // The tensor's bytes into out (end - begin bytes).
  absl::Status read(const SafeTensor& t, void* out) const { return read(t, 0, t.end - t.begin, out); }
  // Bytes [offset, offset + n) of the tensor's data into out.
  absl::Status read(const SafeTensor& t, uint64_t offset, uint64_t n, void* out) const;
  // Elements [first, first + n) of an F32, BF16 or F16 tensor as fp32 into out.
  absl::Status read_f32(const SafeTensor& t, int64_t first, int64_t n, float* out) const;

 private:
  SafetensorsReader() = default;

  std::string path_;
  int fd_ = -1;
  const IoFaultHook* faults_ = nullptr;
  uint64_t data_start_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Whether tensor a of ra and tensor b of rb, of one shape and float types,
// hold the same values (a tied head saved beside its embedding).
absl::StatusOr<bool> same_values(const SafetensorsReader& ra, const SafeTensor& a, const SafetensorsReader& rb,
                                 const SafeTensor& b);

// Takes the next n bytes of a tensor being written.
using ByteSink = std::function<absl::Status(const void* data, size_t n)>;
// Gives tensor i's bytes to `out`, in as many parts as it likes, so nothing
// need hold a whole tensor.
using TensorWriter = std::function<absl::Status(size_t i, const ByteSink& out)>;

// A file's layout before any data is written: the bytes in front of the
// data (the u64 header length and the header, padded so the data starts
// 8-byte aligned) and the tensors with begin/end assigned in order.
struct SafetensorsLayout {
  std::string head;
  std::vector<SafeTensor> tensors;
  uint64_t bytes() const { return head.size() + (tensors.empty() ? 0 : tensors.back().end); }
};
absl::StatusOr<SafetensorsLayout> layout_safetensors(std::vector<SafeTensor> tensors,
                                                     const std::map<std::string, std::string>& metadata);

// The whole file, front to back, into `out`; each tensor must come with
// exactly its size (an Internal error naming it otherwise).
absl::Status serialize_safetensors(const SafetensorsLayout& file, const TensorWriter& write, const ByteSink& out);

// Writes tensors to path, streaming (serialize_safetensors). The file
// appears whole or not at all (written beside it, fsynced, renamed).
// Returns the file's CRC-32C. `faults`: tests only.
absl::StatusOr<uint32_t> write_safetensors(const std::string& path, std::vector<SafeTensor> tensors,
                                           const std::map<std::string, std::string>& metadata,
                                           const TensorWriter& write, const IoFaultHook* faults = nullptr);

}  // namespace zerod
