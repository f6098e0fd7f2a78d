// A checkpoint's manifest.json, as resume and `zero-worker export` read it.
// An input that is a JSON object with a "crc32c" field is sealed afresh
// before it is written, so that mutations reach the checks behind the
// checksum; any other input is written as it is. The directory holds a
// shard file for each of 8 ranks (zeros, so checksums fail at the end).
#include <sstream>

#include "fuzz/fuzz_input.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/worker.h"

namespace {

std::string checkpoint_dir() {
  for (int r = 0; r < 8; ++r) {
    zerod::fuzz::write_scratch("ckpt/" + zerod::shard_file_name(r), std::string(1 << 16, '\0'));
  }
  return zerod::fuzz::scratch_dir() + "/ckpt";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = checkpoint_dir();
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_object() && m.contains("crc32c")) {
    zerod::seal_manifest(m);
    text = m.dump();
  }
  zerod::fuzz::write_scratch("ckpt/manifest.json", text);
  absl::StatusOr<zerod::CheckpointManifest> c = zerod::read_manifest(dir);
  if (c.ok()) {
    // The fields a resumed run reads besides those read_manifest checks.
    zerod::manifest_integer(*c, "step", 0, INT64_MAX).IgnoreError();
    zerod::manifest_unsigned(*c, "data_loader.position").IgnoreError();
    zerod::manifest_real(*c, "last_lr", false).IgnoreError();
    zerod::manifest_real(*c, "loss_scaler.scale", true).IgnoreError();
  }
  std::ostringstream out, err;
  zerod::ExportOptions options;
  options.checkpoint = dir;
  options.out_dir = zerod::fuzz::scratch_dir() + "/export";
  zerod::run_export(options, out, err);
  return 0;
}
