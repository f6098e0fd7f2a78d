#include "runtime/coordinator/job_request.h"

#include <cctype>
#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/config/job_config.h"
#include "runtime/core/strict_json.h"

namespace zerod {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxNameLength = 128;
constexpr int kMaxRestarts = 100;

absl::Status bad(const std::string& why) { return absl::InvalidArgumentError(why); }

bool inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end() && !r->empty(); ++r, ++q) {
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

// `key`'s path against the rules. A glob (data.path) is judged by the part
// before its first wildcard.
absl::Status confine(const std::string& key, const std::string& value, const JobRules& rules) {
  std::string literal = value;
  if (const size_t w = value.find_first_of("*?["); w != std::string::npos) {
    literal = value.substr(0, w);
    literal = literal.substr(0, literal.rfind('/') + 1);
  }
  const fs::path p(literal.empty() ? "." : literal);
  for (const auto& part : p) {
    if (part == "..") return bad(absl::StrCat(key, " '", value, "': '..' is not allowed in a job's paths"));
  }
  if (p.is_relative()) return absl::OkStatus();  // under the job's directory
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(p, ec);
  if (ec) return bad(absl::StrCat(key, " '", value, "' cannot be resolved: ", ec.message()));
  for (const std::string& root : rules.allowed_roots) {
    if (inside(real, root)) return absl::OkStatus();
  }
  return bad(absl::StrCat(key, " '", value, "' is outside the roots this zerod allows (",
                          rules.allowed_roots.empty() ? "none; start zerod with --allow-root"
                                                      : absl::StrJoin(rules.allowed_roots, ", "),
                          "); relative paths are kept in the job's directory"));
}

}  // namespace

absl::StatusOr<int> check_host(const std::string& entry) {
  std::vector<std::string> parts = absl::StrSplit(entry, ':');
  int slots = 1;
  const bool host_ok = !parts[0].empty() && std::isalnum(static_cast<unsigned char>(parts[0][0])) &&
                       parts[0].find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == std::string::npos;
  if (!host_ok || parts.size() > 2 || (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &slots) || slots < 1))) {
    return bad(absl::StrCat("placement host '", entry,
                            "' is not 'host' or 'host:slots' (a host starts with a letter or digit)"));
  }
  return slots;
}

std::string checkpoint_root(const nlohmann::json& config) { return config["run"]["checkpoint"]["dir"]; }

absl::StatusOr<nlohmann::json> prepare_job(const v1::SubmitJobRequest& req, const JobRules& rules) {
  if (req.name().size() > kMaxNameLength) return bad(absl::StrCat("a job name has at most ", kMaxNameLength, " characters"));
  for (char c : req.name()) {
    if (c < 0x20 || c == 0x7f) return bad("a job name is printable text");
  }
  if (req.world_size() < 1) return bad(absl::StrCat("world_size is ", req.world_size(), "; a job has at least 1 rank"));
  if (req.world_size() > rules.slots) {
    return bad(absl::StrCat("the job asks for ", req.world_size(), " ranks but this zerod runs at most ", rules.slots,
                            " (--slots)"));
  }
  int64_t host_slots = 0;
  for (const std::string& h : req.placement().hosts()) {
    ZEROD_ASSIGN_OR_RETURN(const int slots, check_host(h));
    host_slots += slots;
  }
  if (req.placement().hosts_size() > 0 && req.world_size() > host_slots) {
    return bad(absl::StrCat("the job asks for ", req.world_size(), " ranks but its hosts give ", host_slots,
                            " slots (", absl::StrJoin(req.placement().hosts(), ", "),
                            "; a host without ':slots' runs one)"));
  }
  const v1::RestartPolicy& r = req.restart();
  if (r.max_restarts() < 0 || r.max_restarts() > kMaxRestarts) {
    return bad(absl::StrCat("max_restarts is ", r.max_restarts(), "; it is 0 to ", kMaxRestarts));
  }
  if (!std::isfinite(r.hang_timeout_s()) || r.hang_timeout_s() < 0) {
    return bad("hang_timeout_s is a number of seconds, 0 or more (0: zerod's default)");
  }
  if (req.config_json().size() > kMaxConfigBytes) {
    return bad(absl::StrCat("the config is ", req.config_json().size(), " bytes; a job config is at most ",
                            kMaxConfigBytes, " (1 MiB)"));
  }
  absl::StatusOr<nlohmann::json> parsed = parse_strict_json(req.config_json(), "the config");
  if (!parsed.ok()) return bad(std::string(parsed.status().message()));
  nlohmann::json& root = *parsed;
  if (!root.is_object()) return bad("the config is not a JSON object");
  // Defaults first, so the config checked is the one that runs.
  nlohmann::json& run = root["run"];
  if (run.is_object()) {
    if (!run.contains("checkpoint")) run["checkpoint"] = nlohmann::json::object();
    nlohmann::json& ckpt = run["checkpoint"];
    if (ckpt.is_object() && !ckpt.contains("dir")) ckpt["dir"] = "checkpoints";
    if (!run.contains("resume") || run["resume"].is_null()) run["resume"] = "latest";
  } else if (run.is_null()) {
    run = {{"checkpoint", {{"dir", "checkpoints"}}}, {"resume", "latest"}};
  }
  // A shape from init_from's config.json is read here only under an
  // allowed root: a relative path is the job directory's, not made yet.
  if (const nlohmann::json* model = root.contains("model") ? &root["model"] : nullptr;
      model && model->is_object() && model->contains("init_from") && (*model)["init_from"].is_string()) {
    const std::string from = (*model)["init_from"];
    ZEROD_RETURN_IF_ERROR(confine("model.init_from", from, rules));
    const bool shape_given = model->contains("n_layer") || model->value("preset", nlohmann::json("custom")) != "custom";
    if (!shape_given && !fs::path(from).is_absolute()) {
      return bad(absl::StrCat("model.init_from '", from,
                              "': a job takes the model's shape from its config.json only by an absolute path under "
                              "an allowed root (a relative one is the job directory's, made at launch); or give the "
                              "model's preset or sizes"));
    }
    if (absl::Status s = fill_model_from_hf(root); !s.ok()) return bad(absl::StrCat("config: ", s.message()));
  }
  auto cfg = parse_job_config(root, req.world_size());
  if (!cfg.ok()) return bad(absl::StrCat("config: ", cfg.status().message()));
  ZEROD_RETURN_IF_ERROR(confine("run.checkpoint.dir", *cfg->run.checkpoint.dir, rules));
  if (cfg->run.resume != "latest") ZEROD_RETURN_IF_ERROR(confine("run.resume", *cfg->run.resume, rules));
  if (cfg->data.kind != DataKind::kSynthetic && cfg->data.sources.empty())
    ZEROD_RETURN_IF_ERROR(confine("data.path", cfg->data.path, rules));
  for (size_t i = 0; i < cfg->data.sources.size(); ++i)
    ZEROD_RETURN_IF_ERROR(confine(absl::StrCat("data.sources[", i, "].path"), cfg->data.sources[i].path, rules));
  if (cfg->data.eval && cfg->data.eval->fraction == 0) {
    ZEROD_RETURN_IF_ERROR(confine("data.eval.path", cfg->data.eval->path, rules));
  }
  for (const auto& [key, o] : {std::pair{"zero_optimization.offload_optimizer.nvme_path", &cfg->zero.offload_optimizer},
                               std::pair{"zero_optimization.offload_param.nvme_path", &cfg->zero.offload_param}}) {
    if (o->nvme_path) ZEROD_RETURN_IF_ERROR(confine(key, *o->nvme_path, rules));
  }
  // The monitors' directories (output_path/job_name), where rank 0 writes.
  if (const auto tb = tensorboard_log_dir(*cfg)) {
    ZEROD_RETURN_IF_ERROR(confine(cfg->run.tensorboard_dir ? "run.tensorboard_dir" : "tensorboard", *tb, rules));
  }
  if (const auto csv = csv_log_dir(*cfg)) ZEROD_RETURN_IF_ERROR(confine("csv_monitor", *csv, rules));
  return root;
}

}  // namespace zerod
