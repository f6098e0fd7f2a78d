// A job config as a user gives it: a JSON file, `--set` overrides on top,
// the model's shape filled from init_from's config.json, then parsed
// (job_config.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/config/job_config.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/model/hf_config.h"

namespace zerod {

absl::Status apply_override(nlohmann::json& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set '", assignment, "': expected key.path=value, e.g. --set run.steps=50"));
  }
  // Keys and bare words go into the config as they are, and every message
  // that quotes them would fail on bytes that are not UTF-8 text.
  try {
    (void)nlohmann::json(assignment).dump();
  } catch (const nlohmann::json::type_error&) {
    return absl::InvalidArgumentError("--set: an assignment that is not UTF-8 text");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    value = text;  // bare words are strings: --set model.preset=gpt2
  } else {
    ZEROD_ASSIGN_OR_RETURN(value, parse_strict_json(text, absl::StrCat("--set '", assignment, "'")));
  }
  nlohmann::json* node = &root;
  std::vector<std::string> keys = absl::StrSplit(path, '.');
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--set '", assignment, "': empty key in path '", path, "'"));
    }
    if (node->is_null()) *node = nlohmann::json::object();
    if (!node->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("--set '", assignment, "': ",
                                                     i == 0 ? std::string("the config is not a JSON object")
                                                            : absl::StrCat("'", keys[i - 1], "' is not an object")));
    }
    node = &(*node)[keys[i]];
  }
  *node = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> load_job_json(const std::string& path, const std::vector<std::string>& overrides) {
  const std::optional<std::string> text = read_whole_file(path);
  if (!text) return absl::NotFoundError(absl::StrCat("config file '", path, "' cannot be opened"));
  ZEROD_ASSIGN_OR_RETURN(nlohmann::json root, parse_strict_json(*text, absl::StrCat("config file '", path, "'")));
  for (const std::string& o : overrides) ZEROD_RETURN_IF_ERROR(apply_override(root, o));
  return root;
}

absl::Status fill_model_from_hf(nlohmann::json& root) {
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) return absl::OkStatus();
  nlohmann::json& model = root["model"];
  const nlohmann::json from = model.value("init_from", nlohmann::json());
  const nlohmann::json preset = model.value("preset", nlohmann::json("custom"));
  if (!from.is_string() || preset != "custom" || model.contains("n_layer")) return absl::OkStatus();
  absl::StatusOr<GptConfig> hf = read_hf_config(from.get<std::string>());
  if (!hf.ok()) return absl::Status(hf.status().code(), absl::StrCat("model.init_from: ", hf.status().message()));
  const nlohmann::json shape = gpt_config_json(*hf);
  for (const auto& [key, value] : shape.items()) {
    if (!model.contains(key)) model[key] = value;
  }
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> load_job_config(const std::string& path, const std::vector<std::string>& overrides,
                                          int world_size) {
  ZEROD_ASSIGN_OR_RETURN(nlohmann::json root, load_job_json(path, overrides));
  if (absl::Status s = fill_model_from_hf(root); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("config file '", path, "': ", s.message()));
  }
  auto cfg = parse_job_config(root, world_size);
  if (!cfg.ok()) {
    return absl::Status(cfg.status().code(), absl::StrCat("config file '", path, "': ", cfg.status().message()));
  }
  return cfg;
}

}  // namespace zerod
