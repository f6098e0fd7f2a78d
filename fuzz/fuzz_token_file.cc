// zerod's bearer token file.
#include "fuzz/fuzz_input.h"
#include "runtime/coordinator/auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zerod::fuzz::write_scratch("token", {reinterpret_cast<const char*>(data), size});
  zerod::load_token(path).IgnoreError();
  return 0;
}
