#include "runtime/model/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

constexpr const char* kWeights = "adapter_model.safetensors";
constexpr const char* kConfig = "adapter_config.json";

// The shape of tensor `id` in PEFT's file: the layout's, transposed.
std::vector<int64_t> file_shape(const GptLayout& adapters, int id) {
  const std::vector<int64_t>& s = adapters.tensor(id).shape;
  return {s[1], s[0]};
}

// out[j * rows + i] = in[i * cols + j]: [rows, cols] to [cols, rows].
void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
  }
}

// GPT-2's Conv1D weights are [in, out] (fan_in_fan_out), a Llama's
// nn.Linear ones [out, in]; the adapters' files are the same either way.
nlohmann::json peft_config(const LoraConfig& c, Arch arch, const std::string& base_model) {
  std::vector<std::string> targets;
  for (int k = 0; k < lora_targets_of(arch); ++k) {
    if (c.targets[k]) targets.push_back(lora_target_name(arch, k));
  }
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model},
          {"r", c.r},
          {"lora_alpha", c.alpha},
          {"lora_dropout", c.dropout},
          {"target_modules", targets},
          {"fan_in_fan_out", arch != Arch::kLlama},
          {"bias", "none"},
          {"use_rslora", c.use_rslora},
          {"init_lora_weights", true},
          {"inference_mode", true}};
}

// The adapter_config.json fields that change what the adapters compute,
// against the job's.
absl::Status check_peft_config(const std::string& file, const LoraConfig& want, Arch arch) {
  const std::optional<std::string> text = read_whole_file(file);
  if (!text) return absl::NotFoundError(absl::StrCat("no PEFT adapter config at ", file));
  ZEROD_ASSIGN_OR_RETURN(const nlohmann::json c, parse_strict_json(*text, file));
  if (!c.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  const auto mismatch = [&](const char* key, const nlohmann::json& job) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": '", key, "' is ",
                                                   c.contains(key) ? c[key].dump() : "missing",
                                                   " but the job's model.lora has ", job.dump()));
  };
  if (c.value("peft_type", nlohmann::json()) != "LORA") return mismatch("peft_type", "LORA");
  if (!(c.contains("r") && c["r"].is_number_integer() && c["r"].get<int64_t>() == want.r)) return mismatch("r", want.r);
  if (!(c.contains("lora_alpha") && c["lora_alpha"].is_number() && c["lora_alpha"].get<double>() == want.alpha)) {
    return mismatch("lora_alpha", want.alpha);
  }
  if (c.value("use_rslora", nlohmann::json(false)) != want.use_rslora) return mismatch("use_rslora", want.use_rslora);
  if (c.value("bias", nlohmann::json("none")) != "none") return mismatch("bias", "none");
  const bool conv1d = arch != Arch::kLlama;
  if (c.value("fan_in_fan_out", nlohmann::json(conv1d)) != conv1d) return mismatch("fan_in_fan_out", conv1d);
  return absl::OkStatus();
}

}  // namespace

std::string peft_tensor_name(const GptLayout& adapters, const ParamSegment& s) {
  const char* layers = adapters.config().llama() ? "base_model.model.model.layers." : "base_model.model.transformer.h.";
  return absl::StrCat(layers, s.layer, ".", adapters.tensor(s.id).name, ".weight");
}

absl::Status export_peft_adapter(const std::string& dir, const GptLayout& adapters, DType dtype,
                                 const std::string& base_model, const ParamRangeReader& read) {
  ZEROD_RETURN_IF_ERROR(begin_export(dir, dtype));
  const std::vector<ParamSegment>& segs = adapters.segments();
  std::vector<SafeTensor> tensors;
  for (const ParamSegment& s : segs) tensors.push_back({peft_tensor_name(adapters, s), dtype, file_shape(adapters, s.id)});
  // An adapter tensor is small (r rows or columns): read and transposed whole.
  std::vector<float> f32, transposed;
  std::vector<char> converted;
  ZEROD_RETURN_IF_ERROR(write_safetensors(dir + "/" + kWeights, std::move(tensors), {{"format", "pt"}},
                                          [&](size_t i, const ByteSink& out) -> absl::Status {
                                            const ParamSegment& s = segs[i];
                                            const std::vector<int64_t>& shape = adapters.tensor(s.id).shape;
                                            f32.resize(s.numel);
                                            transposed.resize(s.numel);
                                            ZEROD_RETURN_IF_ERROR(read(s.offset, s.offset + s.numel, f32.data()));
                                            transpose(f32.data(), shape[0], shape[1], transposed.data());
                                            converted.resize(s.numel * dtype_size(dtype));
                                            convert_from_f32(dtype, transposed.data(), converted.data(), s.numel);
                                            return out(converted.data(), converted.size());
                                          })
                            .status());
  return replace_file_durably(dir + "/" + kConfig,
                              peft_config(*adapters.lora(), adapters.config().arch, base_model).dump(2) + "\n");
}

absl::StatusOr<PeftAdapter> PeftAdapter::open(const std::string& dir, const GptLayout& adapters) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.lora.init_from: ", dir, " is not a directory (PEFT's adapter directory, with ", kWeights,
                     " and ", kConfig, ")"));
  }
  ZEROD_RETURN_IF_ERROR(check_peft_config(dir + "/" + kConfig, *adapters.lora(), adapters.config().arch));
  const std::string path = dir + "/" + kWeights;
  ZEROD_ASSIGN_OR_RETURN(const SafetensorsReader r, SafetensorsReader::open(path));
  const auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", why)); };
  std::vector<bool> used(r.tensors().size(), false);
  std::vector<std::vector<float>> tensors;
  std::vector<float> file;
  for (const ParamSegment& s : adapters.segments()) {
    const std::string name = peft_tensor_name(adapters, s);
    const SafeTensor* t = r.find(name);
    if (!t) return bad(absl::StrCat("has no tensor '", name, "'"));
    const std::vector<int64_t> shape = file_shape(adapters, s.id);
    if (t->shape != shape) {
      return bad(absl::StrCat("tensor '", name, "' has shape ", nlohmann::json(t->shape).dump(),
                              ", the job's adapter needs ", nlohmann::json(shape).dump()));
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      return bad(absl::StrCat("tensor '", name, "' is ", dtype_name(t->dtype), "; weights must be F32, BF16 or F16"));
    }
    file.resize(s.numel);
    ZEROD_RETURN_IF_ERROR(r.read_f32(*t, 0, s.numel, file.data()));
    if (const auto at = std::ranges::find_if(file, [](float v) { return !std::isfinite(v); }); at != file.end()) {
      return bad(absl::StrCat("tensor '", name, "' holds ", *at, " at element ", at - file.begin(),
                              ": weights must be finite"));
    }
    std::vector<float>& mine = tensors.emplace_back(s.numel);
    transpose(file.data(), shape[0], shape[1], mine.data());
    used[t - r.tensors().data()] = true;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      return bad(absl::StrCat("has a tensor '", r.tensors()[i].name, "' that the job's model.lora (r ",
                              adapters.lora()->r, ", its target_modules) does not"));
    }
  }
  return PeftAdapter(adapters, std::move(tensors));
}

absl::Status PeftAdapter::read(int64_t begin, int64_t end, float* out) const {
  const std::vector<ParamSegment>& segs = layout_->segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    const ParamSegment& s = segs[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo < hi) std::copy(tensors_[i].begin() + (lo - s.offset), tensors_[i].begin() + (hi - s.offset), out + (lo - begin));
  }
  return absl::OkStatus();
}

}  // namespace zerod
