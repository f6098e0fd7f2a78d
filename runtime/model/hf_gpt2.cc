#include "runtime/model/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/hf_config.h"

namespace zerod {
namespace {

// GPT2Config's fields for this model (the activation is the tanh GELU).
static_assert(kLayerNormEps == 1e-5f, "config.json states the LayerNorm epsilon");
nlohmann::json hf_config(const GptConfig& m, DType dtype) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", m.vocab_size},
          {"n_positions", m.block_size},
          {"n_ctx", m.block_size},
          {"n_embd", m.n_embd},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"tie_word_embeddings", true},
          {"bos_token_id", m.vocab_size - 1},
          {"eos_token_id", m.vocab_size - 1},
          {"torch_dtype", torch_dtype(dtype)}};
}

// A file of `positions` for a job of longer sequences: its position table
// has no rows for the rest.
std::string too_few_positions(int64_t positions, const GptConfig& m) {
  return absl::StrCat("the file's model has ", positions, " positions, fewer than model.block_size ", m.block_size,
                      ": set model.block_size (and data.seq_len) to at most ", positions);
}

// The config.json beside `path`, if any, against the model.
absl::Status check_hf_config(const std::string& path, const GptConfig& m) {
  const std::string file = (std::filesystem::path(path).parent_path() / "config.json").string();
  const std::optional<std::string> text = read_whole_file(file);
  if (!text) return absl::OkStatus();
  ZEROD_ASSIGN_OR_RETURN(const nlohmann::json c, parse_strict_json(*text, file));
  if (!c.is_object()) return absl::InvalidArgumentError(absl::StrCat(file, ": not a JSON object"));
  const std::pair<const char*, int> want[] = {{"n_layer", m.n_layer},        {"n_head", m.n_head},
                                              {"n_embd", m.n_embd},          {"vocab_size", m.vocab_size},
                                              {"n_positions", m.block_size}, {"n_ctx", m.block_size}};
  for (const auto& [key, value] : want) {
    if (c.contains(key) && !(c[key].is_number_integer() && c[key].get<int64_t>() == value)) {
      if (value == m.block_size && c[key].is_number_integer() && c[key].get<int64_t>() < value) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": '", key, "' is ", c[key].dump(), ": ",
                                                       too_few_positions(c[key].get<int64_t>(), m)));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": '", key, "' is ", c[key].dump(), " but the job's model has ", value));
    }
  }
  // What a GPT2Config may set that zerod's GPT-2 does otherwise, each with
  // the values zerod computes the same function for.
  // (reorder_and_upcast_attn only upcasts attention to fp32, as zerod always does.)
  const std::pair<const char*, std::vector<nlohmann::json>> fixed[] = {
      {"model_type", {"gpt2"}},
      {"activation_function", {"gelu_new", "gelu_pytorch_tanh"}},  // the tanh GELU
      {"layer_norm_epsilon", {1e-5}},                              // kLayerNormEps, asserted above
      {"tie_word_embeddings", {true}},
      {"scale_attn_weights", {true}},
      {"scale_attn_by_inverse_layer_idx", {false}},
      {"n_inner", {nullptr, 4 * m.n_embd}}};
  for (const auto& [key, allowed] : fixed) {
    if (!c.contains(key) || std::find(allowed.begin(), allowed.end(), c[key]) != allowed.end()) continue;
    std::string also;
    for (size_t i = 1; i < allowed.size(); ++i) absl::StrAppend(&also, " or ", allowed[i].dump());
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": '", key, "' is ", c[key].dump(), "; zerod's GPT-2 has ", allowed[0].dump(), also));
  }
  return absl::OkStatus();
}

}  // namespace

std::string hf_tensor_name(const GptLayout& layout, const ParamSegment& s) {
  const ParamTensorInfo& info = layout.tensor(s.id);
  if (info.per_layer) return absl::StrCat("h.", s.layer, ".", info.name);
  if (s.id == kWte || s.id == kWpe) return absl::StrCat(info.name, ".weight");
  return info.name;
}

absl::Status begin_export(const std::string& dir, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("export: weights in ", dtype_name(dtype), " are not supported"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::ErrnoToStatus(ec.value(), absl::StrCat("export: cannot create ", dir));
  return absl::OkStatus();
}

absl::Status export_gpt2(const std::string& dir, const GptLayout& layout, DType dtype, const ParamRangeReader& read) {
  ZEROD_RETURN_IF_ERROR(begin_export(dir, dtype));
  const std::vector<ParamSegment>& segs = layout.segments();
  std::vector<SafeTensor> tensors;
  for (const ParamSegment& s : segs) tensors.push_back({hf_tensor_name(layout, s), dtype, layout.tensor(s.id).shape});
  // A tensor at a time, in parts of at most kPart elements.
  constexpr int64_t kPart = 1 << 22;
  std::vector<float> f32;
  std::vector<char> converted;
  ZEROD_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", std::move(tensors), {{"format", "pt"}},
                                          [&](size_t i, const ByteSink& out) -> absl::Status {
                                            const ParamSegment& s = segs[i];
                                            for (int64_t at = 0; at < s.numel; at += kPart) {
                                              const int64_t n = std::min(kPart, s.numel - at);
                                              f32.resize(n);
                                              ZEROD_RETURN_IF_ERROR(read(s.offset + at, s.offset + at + n, f32.data()));
                                              if (dtype == DType::kF32) {
                                                ZEROD_RETURN_IF_ERROR(out(f32.data(), n * sizeof(float)));
                                                continue;
                                              }
                                              converted.resize(n * dtype_size(dtype));
                                              convert_from_f32(dtype, f32.data(), converted.data(), n);
                                              ZEROD_RETURN_IF_ERROR(out(converted.data(), converted.size()));
                                            }
                                            return absl::OkStatus();
                                          })
                            .status());
  return replace_file_durably(dir + "/config.json", hf_config(layout.config(), dtype).dump(2) + "\n");
}

absl::StatusOr<Gpt2Weights> Gpt2Weights::open(const std::string& path, const GptLayout& layout) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::string file = (std::filesystem::path(path) / "model.safetensors").string();
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is a directory: model.init_from names the weights file itself",
        std::filesystem::exists(file, ec) ? absl::StrCat(" (", file, ")") : std::string(" (a .safetensors file)")));
  }
  ZEROD_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(path));
  ZEROD_RETURN_IF_ERROR(check_hf_config(path, layout.config()));
  Gpt2Weights w(std::move(r), layout);
  const auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", why)); };
  // Names are bare (GPT2Model) or under "transformer." (GPT2LMHeadModel), not both.
  const bool prefixed = w.reader_.find("transformer.wte.weight") != nullptr;
  const std::string prefix = prefixed ? "transformer." : "";
  std::vector<bool> used(w.reader_.tensors().size(), false);
  for (const ParamSegment& s : layout.segments()) {
    const std::string name = prefix + hf_tensor_name(layout, s);
    const SafeTensor* t = w.reader_.find(name);
    if (!t) return bad(absl::StrCat("has no tensor '", name, "'"));
    const std::vector<int64_t>& shape = layout.tensor(s.id).shape;
    if (s.id == kWpe && t->shape.size() == 2 && t->shape[1] == shape[1] && t->shape[0] < shape[0]) {
      return bad(absl::StrCat("tensor '", name, "' is ", nlohmann::json(t->shape).dump(), ": ",
                              too_few_positions(t->shape[0], layout.config())));
    }
    if (t->shape != shape) {
      return bad(absl::StrCat("tensor '", name, "' has shape ", nlohmann::json(t->shape).dump(), ", the model needs ",
                              nlohmann::json(shape).dump()));
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16) {
      return bad(absl::StrCat("tensor '", name, "' is ", dtype_name(t->dtype), "; weights must be F32, BF16 or F16"));
    }
    w.by_segment_.push_back(t);
    used[t - w.reader_.tensors().data()] = true;
  }
  // An LM head, where the file has one, must be the tied one: wte.
  if (const SafeTensor* head = w.reader_.find("lm_head.weight")) {
    const std::vector<ParamSegment>& segs = layout.segments();
    const auto at = std::find_if(segs.begin(), segs.end(), [](const ParamSegment& s) { return s.id == kWte; });
    const SafeTensor& wte = *w.by_segment_[at - segs.begin()];
    if (head->shape != wte.shape ||
        (head->dtype != DType::kF32 && head->dtype != DType::kBF16 && head->dtype != DType::kF16)) {
      return bad(absl::StrCat("tensor 'lm_head.weight' is ", dtype_name(head->dtype), " of shape ",
                              nlohmann::json(head->shape).dump(), "; zerod's head is wte, ",
                              nlohmann::json(wte.shape).dump()));
    }
    ZEROD_ASSIGN_OR_RETURN(const bool tied, same_values(w.reader_, *head, w.reader_, wte));
    if (!tied) return bad("tensor 'lm_head.weight' differs from wte: zerod's GPT-2 ties its head to wte");
    used[head - w.reader_.tensors().data()] = true;
  }
  static const std::regex buffers(R"((transformer\.)?h\.\d+\.attn\.(masked_)?bias)");
  for (size_t i = 0; i < used.size(); ++i) {
    const std::string& name = w.reader_.tensors()[i].name;
    if (!used[i] && !std::regex_match(name, buffers)) {
      return bad(absl::StrCat("has a tensor '", name, "' that a GPT-2 of this shape does not"));
    }
  }
  return w;
}

absl::Status Gpt2Weights::read(int64_t begin, int64_t end, float* out) const {
  const std::vector<ParamSegment>& segs = layout_->segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    const ParamSegment& s = segs[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    const SafeTensor& t = *by_segment_[i];
    float* dst = out + (lo - begin);
    ZEROD_RETURN_IF_ERROR(reader_.read_f32(t, lo - s.offset, hi - lo, dst));
    // A NaN or infinity would only show as the first step's loss.
    const float* bad = std::find_if(dst, dst + (hi - lo), [](float v) { return !std::isfinite(v); });
    if (bad != dst + (hi - lo)) {
      return absl::InvalidArgumentError(absl::StrCat(reader_.path(), ": tensor '", t.name, "' holds ", *bad,
                                                     " at element ", lo - s.offset + (bad - dst),
                                                     ": weights must be finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerod
