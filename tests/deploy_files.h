// Reading deploy/'s files from the tests: Kubernetes manifests as JSON
// (through python3's yaml), the source tree's paths.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/worker_run.h"

namespace zerod::testing {

inline std::string source_path(const std::string& relative) {
  return std::string(ZEROD_SOURCE_DIR) + "/" + relative;
}

// Every document of a YAML file, in order.
inline std::vector<nlohmann::json> yaml_documents(const std::string& path) {
  const CommandResult r = run_command(
      "python3 -c 'import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))' " + path);
  EXPECT_EQ(r.code, 0) << path << " is not YAML python3 reads: " << r.out;
  if (r.code != 0) return {};
  return nlohmann::json::parse(r.out).get<std::vector<nlohmann::json>>();
}

// The document of that kind (a null one when none is).
inline nlohmann::json document_of_kind(const std::vector<nlohmann::json>& docs, const std::string& kind) {
  for (const nlohmann::json& d : docs) {
    if (d.value("kind", "") == kind) return d;
  }
  ADD_FAILURE() << "no " << kind;
  return nullptr;
}

// A pod template's volume by name, and where its container mounts it.
inline nlohmann::json volume(const nlohmann::json& pod_spec, const std::string& name) {
  for (const nlohmann::json& v : pod_spec["volumes"]) {
    if (v["name"] == name) return v;
  }
  ADD_FAILURE() << "no volume " << name;
  return nullptr;
}
inline std::string mount_path(const nlohmann::json& container, const std::string& volume) {
  for (const nlohmann::json& m : container["volumeMounts"]) {
    if (m["name"] == volume) return m["mountPath"];
  }
  ADD_FAILURE() << "no mount of " << volume;
  return "";
}

// The value after `flag` in an argv, "" when absent.
inline std::string flag_value(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "";
}

}  // namespace zerod::testing
