#include "runtime/model/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/model/hf_config.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// The Hugging Face tensors a segment holds, stacked in order, with their
// shapes; `transposed`: the segment is the stack's transpose ([cols, rows]).
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
};
struct HfSource {
  std::vector<HfTensor> parts;
  bool transposed;
};

HfSource hf_source(const GptLayout& L, const ParamSegment& s) {
  const GptConfig& c = L.config();
  const int64_t C = c.n_embd, V = c.vocab_size, F = c.ffn_hidden, q = int64_t(c.n_head) * c.head_dim(),
                kv = int64_t(c.kv_heads()) * c.head_dim();
  const std::string at = absl::StrCat("model.layers.", s.layer, ".");
  switch (s.id) {
    case kWte:
      return {{{"model.embed_tokens.weight", {V, C}}}, false};
    case kLmHead:
      return {{{"lm_head.weight", {V, C}}}, false};
    case kLnfW:
      return {{{"model.norm.weight", {C}}}, false};
    case kLn1W:
      return {{{at + "input_layernorm.weight", {C}}}, false};
    case kLn2W:
      return {{{at + "post_attention_layernorm.weight", {C}}}, false};
    case kQkvW:
      return {{{at + "self_attn.q_proj.weight", {q, C}},
               {at + "self_attn.k_proj.weight", {kv, C}},
               {at + "self_attn.v_proj.weight", {kv, C}}},
              true};
    case kQkvB:
      return {{{at + "self_attn.q_proj.bias", {q}},
               {at + "self_attn.k_proj.bias", {kv}},
               {at + "self_attn.v_proj.bias", {kv}}},
              false};
    case kAttProjW:
      return {{{at + "self_attn.o_proj.weight", {C, C}}}, true};
    case kFcW:
      return {{{at + "mlp.gate_proj.weight", {F, C}}, {at + "mlp.up_proj.weight", {F, C}}}, true};
    case kFcProjW:
      return {{{at + "mlp.down_proj.weight", {C, F}}}, true};
    default:
      return {{}, false};  // a model layout holds nothing else
  }
}

int64_t part_numel(const HfTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// Row r, column c of part k (a transposed segment [cols, R]): element
// c * R + row0 + r of the segment.
struct Transposed {
  int64_t R, row0;
  int64_t at(int64_t r, int64_t c) const { return c * R + row0 + r; }
};

// Every Hugging Face tensor of `layout`'s segments, as `dtype`: with its
// segment, its part of the segment's source, and the row (or element,
// untransposed) of the segment it starts at.
struct ExportedTensors {
  struct Out {
    size_t seg, part;
    int64_t row0;
  };
  std::vector<SafeTensor> tensors;
  std::vector<Out> outs;
  std::vector<HfSource> sources;  // each segment's
};
ExportedTensors exported_tensors(const GptLayout& layout, DType dtype) {
  ExportedTensors e;
  const std::vector<ParamSegment>& segs = layout.segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    e.sources.push_back(hf_source(layout, segs[i]));
    int64_t row0 = 0;
    for (size_t k = 0; k < e.sources[i].parts.size(); ++k) {
      const HfTensor& t = e.sources[i].parts[k];
      e.tensors.push_back({t.name, dtype, t.shape});
      e.outs.push_back({i, k, row0});
      row0 += e.sources[i].transposed ? t.shape[0] : part_numel(t);
    }
  }
  return e;
}

// Consecutive tensors (of `dtype`) in shards of up to shard_bytes each;
// *total their bytes.
std::vector<std::vector<size_t>> shard_tensors(const std::vector<SafeTensor>& tensors, DType dtype, int64_t shard_bytes,
                                               int64_t* total) {
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0;
  *total = 0;
  for (size_t j = 0; j < tensors.size(); ++j) {
    const int64_t bytes = tensors[j].numel() * dtype_size(dtype);
    if (in_shard > 0 && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(j);
    in_shard += bytes;
    *total += bytes;
  }
  return shards;
}

// The shards an earlier export's index in `dir` names.
std::set<std::string> indexed_shards(const std::string& dir) {
  std::set<std::string> shards;
  const std::optional<std::string> old = read_whole_file(dir + "/" + kIndex);
  if (!old) return shards;
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  const nlohmann::json index = nlohmann::json::parse(*old, nullptr, /*allow_exceptions=*/false);
  if (index.is_object() && index.contains("weight_map") && index["weight_map"].is_object()) {
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (file.is_string() && std::regex_match(file.get<std::string>(), shard)) shards.insert(file.get<std::string>());
    }
  }
  return shards;
}

}  // namespace

absl::Status export_llama(const std::string& dir, const GptLayout& layout, DType dtype, const ParamRangeReader& read,
                          int64_t shard_bytes) {
  ZEROD_RETURN_IF_ERROR(begin_export(dir, dtype));
  const std::vector<ParamSegment>& segs = layout.segments();
  const ExportedTensors e = exported_tensors(layout, dtype);
  const std::vector<SafeTensor>& tensors = e.tensors;
  int64_t total = 0;
  const std::vector<std::vector<size_t>> shards = shard_tensors(tensors, dtype, shard_bytes, &total);
  // The segment being written, whole, as the model holds it.
  std::vector<float> seg, rows;
  std::vector<char> converted;
  int64_t held = -1;
  const auto load = [&](size_t i) -> absl::Status {
    if (held == int64_t(i)) return absl::OkStatus();
    constexpr int64_t kPart = 1 << 22;
    seg.resize(segs[i].numel);
    for (int64_t at = 0; at < segs[i].numel; at += kPart) {
      const int64_t n = std::min(kPart, segs[i].numel - at);
      ZEROD_RETURN_IF_ERROR(read(segs[i].offset + at, segs[i].offset + at + n, seg.data() + at));
    }
    held = int64_t(i);
    return absl::OkStatus();
  };
  const auto emit = [&](const float* v, int64_t n, const ByteSink& out) {
    if (dtype == DType::kF32) return out(v, n * sizeof(float));
    converted.resize(n * dtype_size(dtype));
    convert_from_f32(dtype, v, converted.data(), n);
    return out(converted.data(), converted.size());
  };
  // Once this export is written, the shards of an earlier one that it did
  // not write again go (with the index, or the one file), or transformers
  // would read them instead.
  std::set<std::string> stale = indexed_shards(dir);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t f = 0; f < shards.size(); ++f) {
    const std::string name =
        shards.size() == 1 ? kSingle : absl::StrFormat("model-%05d-of-%05d.safetensors", f + 1, shards.size());
    std::vector<SafeTensor> these;
    for (size_t j : shards[f]) {
      these.push_back(tensors[j]);
      weight_map[tensors[j].name] = name;
    }
    ZEROD_RETURN_IF_ERROR(write_safetensors(dir + "/" + name, std::move(these), {{"format", "pt"}},
                                            [&](size_t t, const ByteSink& out) -> absl::Status {
                                              const ExportedTensors::Out& o = e.outs[shards[f][t]];
                                              const HfSource& src = e.sources[o.seg];
                                              const HfTensor& h = src.parts[o.part];
                                              ZEROD_RETURN_IF_ERROR(load(o.seg));
                                              if (!src.transposed) return emit(seg.data() + o.row0, part_numel(h), out);
                                              // Row r of the Hugging Face tensor is column row0 + r of the segment.
                                              const Transposed x{int64_t(seg.size()) / h.shape[1], o.row0};
                                              rows.resize(h.shape[1]);
                                              for (int64_t r = 0; r < h.shape[0]; ++r) {
                                                for (int64_t c = 0; c < h.shape[1]; ++c) rows[c] = seg[x.at(r, c)];
                                                ZEROD_RETURN_IF_ERROR(emit(rows.data(), h.shape[1], out));
                                              }
                                              return absl::OkStatus();
                                            })
                              .status());
  }
  std::error_code ec;
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    ZEROD_RETURN_IF_ERROR(replace_file_durably(dir + "/" + kIndex, index.dump(2) + "\n"));
    fs::remove(fs::path(dir) / kSingle, ec);
    for (const auto& [name, file] : weight_map.items()) stale.erase(file.get<std::string>());
  } else {
    fs::remove(fs::path(dir) / kIndex, ec);
  }
  for (const std::string& file : stale) fs::remove(fs::path(dir) / file, ec);
  return replace_file_durably(dir + "/config.json", hf_llama_config_json(layout.config(), dtype).dump(2) + "\n");
}

LlamaWeights::LlamaWeights(LlamaWeights&& o) noexcept
    : layout_(o.layout_),
      files_(std::move(o.files_)),
      parts_(std::move(o.parts_)),
      transposed_(std::move(o.transposed_)),
      nf4_(std::move(o.nf4_)),
      held_(o.held_),
      segment_(std::move(o.segment_)) {}

namespace {

// The config.json beside the weights against the job's model: every field
// the same, the job's block_size within the file's positions.
absl::Status check_config(const std::string& path, const GptConfig& job) {
  ZEROD_ASSIGN_OR_RETURN(GptConfig file, read_hf_config(path));
  if (file.block_size < job.block_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the model has ", file.block_size, " positions, fewer than model.block_size ",
                     job.block_size, ": set model.block_size (and data.seq_len) to at most ", file.block_size));
  }
  file.block_size = job.block_size;
  const nlohmann::json have = gpt_config_json(file), want = gpt_config_json(job);
  for (const auto& [key, value] : want.items()) {
    if (have.value(key, nlohmann::json()) != value) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": its config.json gives ", key, " ",
                                                     have.value(key, nlohmann::json()).dump(),
                                                     " but the job's model has ", value.dump()));
    }
  }
  return absl::OkStatus();
}

// An NF4 layer's weights as bitsandbytes dequantizes them, [out, in].
absl::Status dequantize(const BnbNf4Weight& w, float* out) {
  const Nf4HostTensor h(w.out * w.in);
  ZEROD_RETURN_IF_ERROR(read_bnb_nf4(w, h.t));
  nf4_dequantize(h.t, out);
  return absl::OkStatus();
}

absl::Status bad_file(const fs::path& file, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", why));
}

// The files of `weights` (an index, or the one file), each opened once, and
// the file each tensor is in: the index's weight_map, which must name every
// tensor of every file it names, and only there.
absl::Status open_files(const fs::path& weights, std::vector<SafetensorsReader>& files,
                        std::map<std::string, int>& where) {
  if (weights.extension() != ".json") {
    ZEROD_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::open(weights.string()));
    for (const SafeTensor& t : r.tensors()) where[t.name] = 0;
    files.push_back(std::move(r));
    return absl::OkStatus();
  }
  const std::optional<std::string> text = read_whole_file(weights.string());
  if (!text) return absl::NotFoundError(absl::StrCat("cannot read ", weights.string()));
  ZEROD_ASSIGN_OR_RETURN(const nlohmann::json index, parse_strict_json(*text, weights.string()));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return bad_file(weights, "has no 'weight_map' object of tensor names to files");
  }
  std::map<std::string, int> file_of;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      return bad_file(weights, absl::StrCat("'weight_map' gives tensor '", name, "' the file ", file.dump(),
                                            ": a file name in its directory"));
    }
    auto [it, added] = file_of.emplace(file.get<std::string>(), int(files.size()));
    if (added) {
      absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open((weights.parent_path() / it->first).string());
      if (!r.ok()) {
        return absl::Status(r.status().code(), absl::StrCat(weights.string(), " names '", it->first, "' for tensor '",
                                                            name, "': ", r.status().message()));
      }
      files.push_back(std::move(*r));
    }
    where[name] = it->second;
  }
  for (size_t f = 0; f < files.size(); ++f) {
    for (const SafeTensor& t : files[f].tensors()) {
      auto it = where.find(t.name);
      if (it == where.end() || it->second != int(f)) {
        return bad_file(files[f].path(), absl::StrCat("holds tensor '", t.name, "', which the index puts elsewhere"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaWeights> LlamaWeights::open(const std::string& path, const GptLayout& layout) {
  std::error_code ec;
  fs::path weights(path);
  if (weights.filename() == "config.json") weights = weights.parent_path();
  // As transformers: the one file where there is one, else the index.
  if (fs::is_directory(weights, ec)) weights /= fs::exists(weights / kSingle, ec) ? kSingle : kIndex;
  ZEROD_RETURN_IF_ERROR(check_config(weights.string(), layout.config()));
  LlamaWeights w(layout);
  std::map<std::string, int> where;  // each tensor's file
  ZEROD_RETURN_IF_ERROR(open_files(weights, w.files_, where));
  std::map<std::string, bool> used;
  for (const auto& [name, f] : where) used[name] = false;
  const auto find = [&](const std::string& name) -> std::optional<Part> {
    auto it = where.find(name);
    if (it == where.end()) return std::nullopt;
    const SafeTensor* t = w.files_[it->second].find(name);
    if (!t) return std::nullopt;
    return Part{it->second, t};
  };
  const TensorLookup lookup = [&](const std::string& name) {
    const std::optional<Part> p = find(name);
    return p ? FoundTensor{&w.files_[p->file], p->t} : FoundTensor{};
  };
  for (const ParamSegment& s : layout.segments()) {
    std::vector<Part> parts;
    const HfSource src = hf_source(layout, s);
    for (const HfTensor& h : src.parts) {
      if (src.transposed && find(bnb_nf4_state_name(h.name))) {  // a linear layer in NF4
        ZEROD_ASSIGN_OR_RETURN(BnbNf4Weight q, open_bnb_nf4(lookup, h.name, h.shape[0], h.shape[1]));
        parts.push_back(*find(h.name));
        for (const std::string& name : BnbNf4Weight::part_names(h.name)) used[name] = true;
        w.nf4_.emplace(h.name, q);
        continue;
      }
      const std::optional<Part> p = find(h.name);
      if (!p) return bad_file(weights, absl::StrCat("has no tensor '", h.name, "'"));
      const SafeTensor& t = *p->t;
      const fs::path file = w.files_[p->file].path();
      if (t.shape != h.shape) {
        return bad_file(file, absl::StrCat("tensor '", h.name, "' has shape ", nlohmann::json(t.shape).dump(),
                                           ", the model needs ", nlohmann::json(h.shape).dump()));
      }
      if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
        return bad_file(
            file, absl::StrCat("tensor '", h.name, "' is ", dtype_name(t.dtype), "; weights must be F32, BF16 or F16"));
      }
      parts.push_back(*p);
      used[h.name] = true;
    }
    w.parts_.push_back(std::move(parts));
    w.transposed_.push_back(src.transposed);
  }
  // A tied head, where a file keeps one, must be the embedding.
  if (const std::optional<Part> head = find("lm_head.weight"); head && layout.config().tie_embeddings) {
    const std::optional<Part> emb = find("model.embed_tokens.weight");
    bool same = head->t->shape == emb->t->shape && head->t->dtype != DType::kI8 && head->t->dtype != DType::kU8;
    if (same) {
      ZEROD_ASSIGN_OR_RETURN(same, same_values(w.files_[head->file], *head->t, w.files_[emb->file], *emb->t));
    }
    if (!same)
      return bad_file(w.files_[head->file].path(),
                      "tensor 'lm_head.weight' is not model.embed_tokens.weight, "
                      "but config.json ties them");
    used["lm_head.weight"] = true;
  }
  // The rotary frequencies older files kept as buffers are made, not read.
  static const std::regex buffers(R"(model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq)");
  for (const auto& [name, u] : used) {
    if (!u && !std::regex_match(name, buffers)) {
      return bad_file(weights, absl::StrCat("has a tensor '", name, "' that this model does not"));
    }
  }
  return w;
}

absl::Status LlamaWeights::fill(size_t i) const {
  if (held_ == int64_t(i)) return absl::OkStatus();
  const ParamSegment& s = layout_->segments()[i];
  segment_.resize(s.numel);
  // A part's [rows, cols]: an NF4 layer's codes are flat.
  const auto nf4 = [&](const Part& p) {
    auto it = nf4_.find(p.t->name);
    return it == nf4_.end() ? nullptr : &it->second;
  };
  const auto rows_of = [&](const Part& p) { return nf4(p) ? nf4(p)->out : p.t->shape[0]; };
  const int64_t cols = nf4(parts_[i][0]) ? nf4(parts_[i][0])->in : parts_[i][0].t->shape[1], R = s.numel / cols;
  std::vector<float> part;
  int64_t row0 = 0;
  for (const Part& p : parts_[i]) {
    const int64_t rows = rows_of(p);
    part.resize(rows * cols);
    if (const BnbNf4Weight* q = nf4(p)) {
      ZEROD_RETURN_IF_ERROR(dequantize(*q, part.data()));
    } else {
      ZEROD_RETURN_IF_ERROR(files_[p.file].read_f32(*p.t, 0, rows * cols, part.data()));
    }
    const Transposed x{R, row0};
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) segment_[x.at(r, c)] = part[r * cols + c];
    }
    row0 += rows;
  }
  held_ = int64_t(i);
  return absl::OkStatus();
}

absl::Status LlamaWeights::read(int64_t begin, int64_t end, float* out) const {
  const std::vector<ParamSegment>& segs = layout_->segments();
  for (size_t i = 0; i < segs.size(); ++i) {
    const ParamSegment& s = segs[i];
    const int64_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    float* dst = out + (lo - begin);
    if (transposed_[i]) {
      std::lock_guard<std::mutex> lock(mu_);
      ZEROD_RETURN_IF_ERROR(fill(i));
      std::copy(segment_.begin() + (lo - s.offset), segment_.begin() + (hi - s.offset), dst);
    } else {
      // Stacked parts: each one's elements in turn.
      int64_t at = s.offset;
      for (const Part& p : parts_[i]) {
        const int64_t plo = std::max(lo, at), phi = std::min(hi, at + p.t->numel());
        if (plo < phi) ZEROD_RETURN_IF_ERROR(files_[p.file].read_f32(*p.t, plo - at, phi - plo, out + (plo - begin)));
        at += p.t->numel();
      }
    }
    // A NaN or infinity would only show as the first step's loss.
    const float* nonfinite = std::find_if(dst, dst + (hi - lo), [](float v) { return !std::isfinite(v); });
    if (nonfinite != dst + (hi - lo)) {
      return absl::InvalidArgumentError(absl::StrCat(files_[parts_[i][0].file].path(), ": a tensor of '",
                                                     layout_->tensor(s.id).name, "' (layer ", s.layer, ") holds ",
                                                     *nonfinite, ": weights must be finite"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> LlamaWeights::read_nf4(int layer, int module, const Nf4Tensor& into) const {
  const std::string name = absl::StrCat("model.layers.", layer, module < kLoraGate ? ".self_attn." : ".mlp.",
                                        lora_target_name(Arch::kLlama, module), ".weight");
  auto it = nf4_.find(name);
  if (it == nf4_.end()) return false;
  if (into.n != it->second.out * it->second.in) {
    return absl::InternalError(
        absl::StrCat(name, " has ", it->second.out * it->second.in, " weights, asked for ", into.n));
  }
  ZEROD_RETURN_IF_ERROR(read_bnb_nf4(it->second, into));
  return true;
}

}  // namespace zerod
