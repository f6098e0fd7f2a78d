// zero-worker export: a checkpoint's master weights as Hugging Face GPT-2
// model.safetensors and config.json (worker.h). Every shard file is checked
// against the manifest first; then each tensor is read from whichever saved
// ranks hold it and written, one tensor at a time.
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/worker.h"
#include "runtime/model/hf_gpt2.h"
#include "shard/saved_shards.h"

namespace zerod {
namespace {

absl::StatusOr<DType> export_dtype(const std::string& name) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (name == dtype_name(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("--dtype '", name, "' is not one of: fp32, bf16, fp16"));
}

// Returns the number of parameters written.
absl::StatusOr<int64_t> export_checkpoint(std::string checkpoint, const std::string& out_dir, DType dtype) {
  // A checkpoint root stands for the checkpoint its `latest` names.
  if (!std::filesystem::exists(checkpoint + "/manifest.json") && std::filesystem::exists(checkpoint + "/latest")) {
    ZEROD_ASSIGN_OR_RETURN(checkpoint, latest_checkpoint(checkpoint));
  }
  ZEROD_ASSIGN_OR_RETURN(CheckpointManifest m, read_manifest(checkpoint));
  const GptLayout layout(m.model);
  if (m.json.at("tensors") != manifest_tensors(layout)) {
    return absl::InvalidArgumentError(absl::StrCat(m.path, ": its tensor table is not this build's layout of its model"));
  }
  for (const ManifestFile& f : m.files) ZEROD_RETURN_IF_ERROR(verify_file(f));
  SavedShards saved(layout, m.optimizer, file_paths(m.files));
  ZEROD_RETURN_IF_ERROR(export_gpt2(out_dir, layout, dtype, [&](int64_t begin, int64_t end, float* out) {
    return saved.read(begin, end, out, nullptr, nullptr);
  }));
  return layout.num_params();
}

}  // namespace

int run_export(const std::string& checkpoint, const std::string& out_dir, const std::string& dtype_name,
               std::ostream& out, std::ostream& err) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<DType> dtype = export_dtype(dtype_name);
  absl::StatusOr<int64_t> params = dtype.ok() ? export_checkpoint(checkpoint, out_dir, *dtype) : dtype.status();
  if (!params.ok()) {
    err << "zero-worker export: error: " << params.status().message() << "\n";
    return exit_code_for(params.status());
  }
  const std::string file = out_dir + "/model.safetensors";
  out << "export: " << *params << " parameters (" << dtype_name << ") from " << checkpoint << " to " << file << " ("
      << std::filesystem::file_size(file) << " bytes) and config.json in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  return kExitOk;
}

}  // namespace zerod
