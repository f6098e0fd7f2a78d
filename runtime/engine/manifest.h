// A checkpoint's manifest.json: what a run must share with a checkpoint to
// resume it, and reading one back with its shard files listed. Written by
// the trainer (trainer_checkpoint.cc), read by resume and by export.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/config/job_config.h"
#include "runtime/model/gpt_layout.h"

namespace zerod {

// 2: the manifest carries its own checksum ("crc32c").
inline constexpr int kManifestVersion = 2;

std::string shard_file_name(int rank);  // "rank-00003.safetensors"

// Every parameter tensor of the layout by name, with its shape and offset
// in the flat buffer (the manifest's "tensors").
nlohmann::json manifest_tensors(const GptLayout& layout);

// The fields a resumed run must match, and those that describe the
// partition: format, version, model, precision, tensors (name, shape and
// flat offset of each), world_size, zero_stage, optimizer; with model.lora,
// "lora": the adapters' settings (r, alpha, use_rslora, dropout,
// target_modules) and their base ({quant, init_from: absolute path} or
// {quant, seed}).
nlohmann::json manifest_lora(const JobConfig& cfg);
nlohmann::json manifest_shape(const GptLayout& layout, const JobConfig& cfg, int world_size, int zero_stage);

// Sets m["crc32c"] to the CRC-32C of m's compact dump without that field,
// which read_manifest checks: a manifest edited by hand is refused.
void seal_manifest(nlohmann::json& m);

struct ManifestFile {
  std::string path;
  uint32_t crc32c;
  uint64_t bytes;
};

struct CheckpointManifest {
  std::string path;  // of manifest.json
  nlohmann::json json;
  GptConfig model;
  std::optional<LoraConfig> lora;  // a LoRA run's adapters: its tensors are theirs
  OptimizerConfig optimizer;  // type and hyper-parameters (not the lr)
  int world_size = 0, zero_stage = 0;
  std::vector<ManifestFile> files;  // one per rank of the saved partition (one under stage 0)
};

// Reads and checks <dir>/manifest.json: a zerod checkpoint of this format
// version whose checksum matches, with every field that describes the
// model, the optimizer and the files present and well-typed. Errors name
// the file and the field.
absl::StatusOr<CheckpointManifest> read_manifest(const std::string& dir);

// A field of the manifest (`key`: "a.b" is m["a"]["b"]) as a resumed run
// reads it, or InvalidArgument naming the file, the field and the range:
// an integer in [lo, hi]; a finite number, not negative (or positive).
absl::StatusOr<int64_t> manifest_integer(const CheckpointManifest& c, const std::string& key, int64_t lo, int64_t hi);
absl::StatusOr<uint64_t> manifest_unsigned(const CheckpointManifest& c, const std::string& key);
absl::StatusOr<double> manifest_real(const CheckpointManifest& c, const std::string& key, bool positive);

// The layout of the parameters the checkpoint holds: the model's, or a
// LoRA run's adapters'.
GptLayout manifest_layout(const CheckpointManifest& c);

// The files' paths, in rank order.
std::vector<std::string> file_paths(const std::vector<ManifestFile>& files);

// DataLoss naming the file when its size or CRC-32C is not the manifest's.
absl::Status verify_file(const ManifestFile& f);

}  // namespace zerod
