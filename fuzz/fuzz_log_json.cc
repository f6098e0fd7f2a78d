// --log-format json: whatever bytes an error message holds, every line on
// stdout is one JSON object (stderr has the same message for people).
#include <cstdlib>
#include <sstream>

#include "fuzz/fuzz_input.h"
#include "runtime/telemetry/run_output.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::ostringstream out, err;
  zerod::RunOutput output(zerod::LogFormat::kJson, out, err);
  output.error(0, std::string(reinterpret_cast<const char*>(data), size));
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);) {
    if (!nlohmann::json::accept(line)) abort();
  }
  return 0;
}
