#include "runtime/engine/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/core/crc32c.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"

namespace zerod {
namespace {

constexpr std::pair<OptimizerType, const char*> kOptimizers[] = {
    {OptimizerType::kAdamW, "AdamW"}, {OptimizerType::kAdam, "Adam"}, {OptimizerType::kAdamW8bit, "AdamW8bit"}};

const char* optimizer_name(OptimizerType t) {
  for (const auto& [type, name] : kOptimizers) {
    if (type == t) return name;
  }
  return "?";
}

// What the update's math depends on; bias_correction only where it is off,
// so checkpoints from before it was a setting read the same.
nlohmann::json manifest_optimizer(const OptimizerConfig& o) {
  nlohmann::json j = {{"type", optimizer_name(o.type)},
                      {"betas", {o.beta1, o.beta2}},
                      {"eps", o.eps},
                      {"weight_decay", o.weight_decay}};
  if (!o.bias_correction) j["bias_correction"] = false;
  return j;
}

// The CRC-32C and size of a whole file; errors keep errno's kind (a disk
// failing under the file is not bad input).
absl::StatusOr<std::pair<uint32_t, uint64_t>> file_crc(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t n = 0;
  for (ssize_t r; (r = ::read(fd, buf.data(), buf.size())) != 0;) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const absl::Status s = absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
      ::close(fd);
      return s;
    }
    crc = crc32c(buf.data(), static_cast<size_t>(r), crc);
    n += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return std::make_pair(crc, n);
}

// CRC-32C of the manifest's compact dump without its checksum field.
uint32_t manifest_crc(nlohmann::json m) {
  if (m.is_object()) m.erase("crc32c");
  const std::string text = m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return crc32c(text.data(), text.size(), 0);
}

// The value at `key` ("a.b" descends), null where absent.
nlohmann::json manifest_field(const nlohmann::json& m, const std::string& key) {
  const nlohmann::json* at = &m;
  for (const auto& part : absl::StrSplit(key, '.')) {
    const std::string name(part);
    if (!at->is_object() || !at->contains(name)) return nullptr;
    at = &(*at)[name];
  }
  return *at;
}

absl::Status field_error(const CheckpointManifest& c, const std::string& key, const nlohmann::json& v,
                         const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrCat(c.path, ": '", key, "' is ", v.is_null() ? "missing" : v.dump(), ", not ", want));
}

// The manifest's parts as a resumed run reads them. Their nlohmann
// exceptions (a field missing or mistyped) are read_manifest's to report;
// what they refuse is said without the file's path, which it adds.

absl::StatusOr<LoraConfig> read_lora(const nlohmann::json& l, Arch arch) {
  LoraConfig lora;
  lora.r = l.at("r").get<int>();
  lora.alpha = l.at("alpha").get<double>();
  lora.use_rslora = l.at("use_rslora").get<bool>();
  lora.dropout = l.at("dropout").get<double>();
  lora.targets.fill(false);
  for (const nlohmann::json& t : l.at("target_modules")) {
    const std::string name = t.get<std::string>();
    const int n = lora_targets_of(arch);
    int k = 0;
    while (k < n && name != lora_target_name(arch, k)) ++k;
    if (k == n) return absl::InvalidArgumentError(absl::StrCat("lora: target module '", name, "' is not known"));
    lora.targets[k] = true;
  }
  if (absl::Status s = validate_lora_config(lora, arch); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("lora: ", s.message()));
  }
  return lora;
}

absl::Status read_optimizer(const nlohmann::json& opt, OptimizerConfig& o) {
  const std::string type = opt.at("type").get<std::string>();
  bool known = false;
  for (const auto& [t, name] : kOptimizers) {
    if (type == name) o.type = t, known = true;
  }
  if (!known) return absl::InvalidArgumentError(absl::StrCat("optimizer type '", type, "' is not known"));
  o.beta1 = opt.at("betas").at(0).get<double>();
  o.beta2 = opt.at("betas").at(1).get<double>();
  o.eps = opt.at("eps").get<double>();
  o.weight_decay = opt.at("weight_decay").get<double>();
  o.bias_correction = !opt.contains("bias_correction") || opt.at("bias_correction").get<bool>();
  return absl::OkStatus();
}

// The world, the stage and a shard file a rank (one at stage 0), each a
// file in `dir`.
absl::Status read_files(const nlohmann::json& m, const std::string& dir, CheckpointManifest& c) {
  c.world_size = m.at("world_size").get<int>();
  c.zero_stage = m.at("zero_stage").get<int>();
  const nlohmann::json& list = m.at("files");
  const size_t parts = c.zero_stage > 0 ? static_cast<size_t>(c.world_size) : 1;
  if (c.world_size < 1 || c.zero_stage < 0 || c.zero_stage > 3 || list.size() != parts) {
    return absl::InvalidArgumentError(absl::StrCat("lists ", list.size(), " shard files for world_size ", c.world_size,
                                                   " at zero_stage ", c.zero_stage));
  }
  for (size_t r = 0; r < parts; ++r) {
    if (list[r].at("rank").get<size_t>() != r) {
      return absl::InvalidArgumentError(absl::StrCat("files[", r, "] is not rank ", r, "'s"));
    }
    const std::string name = list[r].at("name").get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("files[", r, "] names '", name, "', not a file in the checkpoint directory"));
    }
    c.files.push_back(
        {absl::StrCat(dir, "/", name), list[r].at("crc32c").get<uint32_t>(), list[r].at("bytes").get<uint64_t>()});
  }
  return absl::OkStatus();
}

}  // namespace

void seal_manifest(nlohmann::json& m) { m["crc32c"] = manifest_crc(m); }

absl::StatusOr<int64_t> manifest_integer(const CheckpointManifest& c, const std::string& key, int64_t lo, int64_t hi) {
  const nlohmann::json v = manifest_field(c.json, key);
  const std::string want = absl::StrCat("an integer in [", lo, ", ", hi, "]");
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo) return static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= lo && i <= hi) return i;
  }
  return field_error(c, key, v, want);
}

absl::StatusOr<uint64_t> manifest_unsigned(const CheckpointManifest& c, const std::string& key) {
  const nlohmann::json v = manifest_field(c.json, key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  return field_error(c, key, v, "an integer in [0, 2^64)");
}

absl::StatusOr<double> manifest_real(const CheckpointManifest& c, const std::string& key, bool positive) {
  const nlohmann::json v = manifest_field(c.json, key);
  if (v.is_number()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && (positive ? d > 0 : d >= 0)) return d;
  }
  return field_error(c, key, v, positive ? "a finite positive number" : "a finite number, not negative");
}

std::string shard_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.safetensors", rank);
  return name;
}

nlohmann::json manifest_tensors(const GptLayout& layout) {
  nlohmann::json t = nlohmann::json::array();
  for (const ParamSegment& s : layout.segments()) {
    const ParamTensorInfo& info = layout.tensor(s.id);
    const std::string name = info.per_layer ? absl::StrCat("h.", s.layer, ".", info.name) : info.name;
    t.push_back({{"name", name}, {"shape", info.shape}, {"offset", s.offset}});
  }
  return t;
}

nlohmann::json manifest_lora(const JobConfig& cfg) {
  const LoraConfig& c = cfg.lora->adapters;
  std::vector<std::string> targets;
  for (int k = 0; k < lora_targets_of(cfg.model.arch); ++k) {
    if (c.targets[k]) targets.push_back(lora_target_name(cfg.model.arch, k));
  }
  // The base the adapters were trained beside: a file, or the seed's draw.
  nlohmann::json base = {{"quant", cfg.lora->nf4_base ? "nf4" : "none"}};
  if (cfg.init_from) {
    base["init_from"] = std::filesystem::absolute(*cfg.init_from).lexically_normal().string();
  } else {
    base["seed"] = cfg.run.seed;
  }
  return {{"r", c.r},
          {"alpha", c.alpha},
          {"use_rslora", c.use_rslora},
          {"dropout", c.dropout},
          {"target_modules", targets},
          {"base", base}};
}

nlohmann::json manifest_shape(const GptLayout& layout, const JobConfig& cfg, int world_size, int zero_stage) {
  const GptConfig& m = layout.config();
  nlohmann::json shape = {{"format", "zerod-checkpoint"},
                          {"version", kManifestVersion},
                          {"model", gpt_config_json(m)},
                          {"precision", dtype_name(cfg.precision)},
                          {"tensors", manifest_tensors(layout)},
                          {"world_size", world_size},
                          {"zero_stage", zero_stage},
                          {"optimizer", manifest_optimizer(cfg.optimizer)}};
  if (cfg.lora) shape["lora"] = manifest_lora(cfg);
  return shape;
}

absl::StatusOr<CheckpointManifest> read_manifest(const std::string& dir) {
  CheckpointManifest c;
  c.path = dir + "/manifest.json";
  const std::optional<std::string> text = read_whole_file(c.path);
  if (!text) return absl::NotFoundError(absl::StrCat("no checkpoint manifest at ", c.path));
  absl::StatusOr<nlohmann::json> parsed = parse_strict_json(*text, c.path);
  if (!parsed.ok()) return parsed.status();
  c.json = *std::move(parsed);
  const nlohmann::json& m = c.json;
  const auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat(c.path, ": ", why)); };
  // Compared as JSON values, so a field of another type is a mismatch, not an exception.
  const auto field = [&](const char* key) { return m.is_object() && m.contains(key) ? m[key] : nlohmann::json(); };
  if (field("format") != "zerod-checkpoint") return bad("not a zerod checkpoint manifest");
  if (field("version") != kManifestVersion) {
    return bad(absl::StrCat("format version ", field("version").dump(), " is not ", kManifestVersion,
                            ", the one this build reads"));
  }
  if (const nlohmann::json crc = field("crc32c"); !crc.is_number_unsigned() || crc.get<uint64_t>() != manifest_crc(m)) {
    return bad(absl::StrCat("its checksum ('crc32c' ", crc.is_null() ? "missing" : crc.dump(),
                            ") does not match its contents: edited by hand or damaged"));
  }
  if (!field("tensors").is_array()) return bad("'tensors' is missing or not a list");
  try {
    c.model = gpt_config_from_json(m.at("model"));
    if (absl::Status s = validate_gpt_config(c.model); !s.ok()) return bad(absl::StrCat("model: ", s.message()));
    if (m.contains("lora")) {
      absl::StatusOr<LoraConfig> lora = read_lora(m.at("lora"), c.model.arch);
      if (!lora.ok()) return bad(std::string(lora.status().message()));
      c.lora = *lora;
    }
    if (absl::Status s = read_optimizer(m.at("optimizer"), c.optimizer); !s.ok()) {
      return bad(std::string(s.message()));
    }
    if (absl::Status s = read_files(m, dir, c); !s.ok()) return bad(std::string(s.message()));
    // The shard files hold every parameter, in 2 bytes at least: a shape
    // they cannot hold is refused before its layout is built.
    uint64_t stored = 0;
    for (const ManifestFile& f : c.files) {
      std::error_code ec;
      const uintmax_t bytes = std::filesystem::file_size(f.path, ec);
      if (ec) return absl::ErrnoToStatus(ec.value(), f.path);
      stored += bytes;
    }
    const int64_t n = c.lora ? lora_param_count(c.model, *c.lora) : gpt_param_count(c.model);
    if (uint64_t(n) > stored / 2) {
      return bad(
          absl::StrCat("'model' claims ", n, " parameters, more than its shard files' ", stored, " bytes can hold"));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::StrCat("missing or mistyped field: ", e.what()));
  }
  return c;
}

GptLayout manifest_layout(const CheckpointManifest& c) {
  return c.lora ? GptLayout::adapters(c.model, *c.lora) : GptLayout(c.model);
}

std::vector<std::string> file_paths(const std::vector<ManifestFile>& files) {
  std::vector<std::string> paths;
  for (const ManifestFile& f : files) paths.push_back(f.path);
  return paths;
}

absl::Status verify_file(const ManifestFile& f) {
  ZEROD_ASSIGN_OR_RETURN(auto crc_size, file_crc(f.path));
  if (crc_size.first != f.crc32c || crc_size.second != f.bytes) {
    return absl::DataLossError(absl::StrCat(f.path, ": checksum or size does not match the manifest (", crc_size.second,
                                            " bytes with CRC-32C ", crc_size.first, ", the manifest says ", f.bytes,
                                            " bytes with ", f.crc32c, ")"));
  }
  return absl::OkStatus();
}

}  // namespace zerod
