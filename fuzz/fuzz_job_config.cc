// The job config and --set: the input's first part is the file, each later
// part (NUL-separated) one override; the world size comes from the last byte.
#include "fuzz/fuzz_input.h"
#include "runtime/config/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = zerod::fuzz::split_at_nul(data, size, 9);
  const std::string path = zerod::fuzz::write_scratch("job.json", parts[0]);
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  const int world_size = size ? 1 + data[size - 1] % 8 : 1;
  zerod::load_job_config(path, overrides, world_size).IgnoreError();
  return 0;
}
