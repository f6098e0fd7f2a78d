// A safetensors file: its header checked whole, then every tensor read.
#include "fuzz/fuzz_input.h"
#include "runtime/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zerod::fuzz::write_scratch("model.safetensors", {reinterpret_cast<const char*>(data), size});
  absl::StatusOr<zerod::SafetensorsReader> r = zerod::SafetensorsReader::open(path);
  if (!r.ok()) return 0;
  std::vector<char> bytes;
  for (const zerod::SafeTensor& t : r->tensors()) {
    // The header was checked against the file's size, so this is bounded by the input.
    bytes.resize(t.end - t.begin);
    r->read(t, bytes.data()).IgnoreError();
  }
  return 0;
}
