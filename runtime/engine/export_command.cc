// zero-worker export: a checkpoint's master weights as Hugging Face GPT-2
// model.safetensors and config.json (worker.h); a LoRA run's as a PEFT
// adapter, or merged into its base. Every shard file is checked against the
// manifest first; then each tensor is read from whichever saved ranks hold
// it and written, one tensor at a time.
#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/worker.h"
#include "runtime/model/hf_gpt2.h"
#include "runtime/model/hf_llama.h"
#include "runtime/model/lora_merge.h"
#include "runtime/model/peft_adapter.h"
#include "shard/saved_shards.h"

namespace zerod {
namespace {

// A model's Hugging Face files: GPT-2's, or the Llama family's.
absl::Status export_model(const std::string& dir, const GptLayout& layout, DType dtype, const ParamRangeReader& read) {
  return layout.config().llama() ? export_llama(dir, layout, dtype, read) : export_gpt2(dir, layout, dtype, read);
}

absl::StatusOr<DType> export_dtype(const std::string& name) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (name == dtype_name(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("--dtype '", name, "' is not one of: fp32, bf16, fp16"));
}

// Returns the number of parameters written.
absl::StatusOr<int64_t> export_checkpoint(const ExportOptions& o, DType dtype) {
  std::string checkpoint = o.checkpoint;
  // A checkpoint root stands for the checkpoint its `latest` names.
  if (!std::filesystem::exists(checkpoint + "/manifest.json") && std::filesystem::exists(checkpoint + "/latest")) {
    ZEROD_ASSIGN_OR_RETURN(checkpoint, latest_checkpoint(checkpoint));
  }
  ZEROD_ASSIGN_OR_RETURN(CheckpointManifest m, read_manifest(checkpoint));
  if (!m.lora && (o.adapter || o.merge)) {
    return absl::InvalidArgumentError(absl::StrCat(m.path, ": not a LoRA run's checkpoint: --",
                                                   o.adapter ? "adapter" : "merge",
                                                   " needs one (export without it writes its model)"));
  }
  if (m.lora && !o.adapter && !o.merge) {
    return absl::InvalidArgumentError(absl::StrCat(
        m.path, ": a LoRA run's checkpoint holds its adapters only: --adapter writes them as a PEFT adapter, "
                "--merge the model with them folded in"));
  }
  if (o.base && !o.merge) return absl::InvalidArgumentError("--base is the base model of --merge");
  const GptLayout layout = manifest_layout(m);
  if (m.json.at("tensors") != manifest_tensors(layout)) {
    return absl::InvalidArgumentError(absl::StrCat(m.path, ": its tensor table is not this build's layout of its model"));
  }
  for (const ManifestFile& f : m.files) ZEROD_RETURN_IF_ERROR(verify_file(f));
  SavedShards saved(layout, m.optimizer, file_paths(m.files));
  const ParamRangeReader read_saved = [&](int64_t begin, int64_t end, float* out) {
    return saved.read(begin, end, out, nullptr, nullptr);
  };
  if (!m.lora) {
    ZEROD_RETURN_IF_ERROR(export_model(o.out_dir, layout, dtype, read_saved));
    return layout.num_params();
  }
  const nlohmann::json& base = m.json.at("lora").at("base");
  const std::optional<std::string> base_file =
      o.base ? o.base : base.contains("init_from") ? std::optional(base.at("init_from").get<std::string>()) : std::nullopt;
  if (o.adapter) {
    ZEROD_RETURN_IF_ERROR(export_peft_adapter(o.out_dir, layout, dtype, base_file.value_or(""), read_saved));
    return layout.num_params();
  }
  const GptLayout model(m.model);
  const uint64_t seed = base.contains("seed") ? base.at("seed").get<uint64_t>() : 0;
  if (!base_file && !base.contains("seed")) {
    return absl::InvalidArgumentError(absl::StrCat(m.path, ": 'lora.base' names no base; give it with --base"));
  }
  ZEROD_ASSIGN_OR_RETURN(ParamInit base_init, initial_params(model, seed, base_file));
  // An NF4 base is rounded as the run held it, unless it was read from a
  // 4-bit model's files, whose values are those already.
  bool rounded = base.value("quant", "none") == "nf4";
  if (rounded) {
    ZEROD_ASSIGN_OR_RETURN(const Nf4ModuleReader held, held_nf4_modules(model, base_file));
    rounded = !held;
  }
  MergedWeights merged(model, layout, std::move(base_init), read_saved, rounded);
  ZEROD_RETURN_IF_ERROR(export_model(o.out_dir, model, dtype, [&](int64_t begin, int64_t end, float* out) {
    return merged.read(begin, end, out);
  }));
  return model.num_params();
}

}  // namespace

int run_export(const ExportOptions& o, std::ostream& out, std::ostream& err) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<DType> dtype = export_dtype(o.dtype);
  absl::StatusOr<int64_t> params = dtype.ok() ? export_checkpoint(o, *dtype) : dtype.status();
  if (!params.ok()) {
    err << "zero-worker export: error: " << params.status().message() << "\n";
    return exit_code_for(params.status());
  }
  // One weights file, or (a large Llama's) shards and their index.
  std::string file = o.out_dir + (o.adapter ? "/adapter_model.safetensors" : "/model.safetensors");
  std::string size;
  if (std::filesystem::exists(file)) {
    size = absl::StrCat(std::filesystem::file_size(file), " bytes");
  } else {
    file = o.out_dir + "/model.safetensors.index.json";
    std::ifstream in(file);
    size = absl::StrCat(nlohmann::json::parse(in).at("metadata").at("total_size").get<int64_t>(),
                        " bytes in shards");
  }
  out << "export: " << *params << (o.adapter ? " adapter" : "") << " parameters (" << o.dtype << ")"
      << (o.merge ? ", adapters merged," : "") << " from " << o.checkpoint << " to " << file << " (" << size
      << ") and " << (o.adapter ? "adapter_config.json" : "config.json")
      << " in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  return kExitOk;
}

}  // namespace zerod
