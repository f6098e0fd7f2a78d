#include "runtime/config/json_reader.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/core/memory.h"

namespace zerod {
namespace {

const nlohmann::json& empty_object() {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return kEmpty;
}

std::string type_of(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

absl::Status config_error(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

JsonReader::JsonReader(const nlohmann::json& obj, std::string path)
    : obj_(&obj), path_(std::move(path)) {}

std::string JsonReader::key_path(const char* key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

bool JsonReader::has(const char* key) const {
  auto it = obj_->find(key);
  return it != obj_->end() && !it->is_null();
}

const nlohmann::json* JsonReader::find(const char* key) {
  read_.insert(key);
  auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json* JsonReader::raw(const char* key) { return find(key); }

absl::Status JsonReader::read(const char* key, int64_t* out) {
  const nlohmann::json* v = find(key);
  if (!v) return absl::OkStatus();
  if (v->is_number_integer()) {
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  // DeepSpeed configs often write integers as floats (5e8).
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      *out = static_cast<int64_t>(d);
      return absl::OkStatus();
    }
  }
  return config_error(key_path(key), absl::StrCat("expected an integer, got ", v->dump()));
}

absl::Status JsonReader::read(const char* key, int* out) {
  int64_t v = *out;
  ZEROD_RETURN_IF_ERROR(read(key, &v));
  if (v < INT32_MIN || v > INT32_MAX) {
    return config_error(key_path(key), absl::StrCat("value ", v, " is out of range"));
  }
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status JsonReader::read(const char* key, double* out) {
  const nlohmann::json* v = find(key);
  if (!v) return absl::OkStatus();
  if (!v->is_number()) {
    return config_error(key_path(key), absl::StrCat("expected a number, got ", v->dump()));
  }
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status JsonReader::read(const char* key, bool* out) {
  const nlohmann::json* v = find(key);
  if (!v) return absl::OkStatus();
  if (!v->is_boolean()) {
    return config_error(key_path(key), absl::StrCat("expected true or false, got ", v->dump()));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status JsonReader::read(const char* key, std::string* out) {
  const nlohmann::json* v = find(key);
  if (!v) return absl::OkStatus();
  if (!v->is_string()) {
    return config_error(key_path(key), absl::StrCat("expected a string, got ", v->dump()));
  }
  *out = v->get<std::string>();
  return absl::OkStatus();
}

template <class T>
absl::Status JsonReader::read_optional(const char* key, std::optional<T>* out) {
  if (!has(key)) {
    find(key);  // an explicit null counts as read
    return absl::OkStatus();
  }
  T v{};
  ZEROD_RETURN_IF_ERROR(read(key, &v));
  *out = std::move(v);
  return absl::OkStatus();
}

absl::Status JsonReader::read(const char* key, std::optional<std::string>* out) { return read_optional(key, out); }

absl::Status JsonReader::read(const char* key, std::optional<int64_t>* out) { return read_optional(key, out); }

absl::Status JsonReader::read_bytes(const char* key, std::optional<uint64_t>* out) {
  const nlohmann::json* v = find(key);
  if (!v) return absl::OkStatus();
  if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) {
    *out = v->get<uint64_t>();
    return absl::OkStatus();
  }
  if (v->is_string()) {
    auto bytes = parse_byte_size(v->get<std::string>());
    if (!bytes.ok()) return config_error(key_path(key), std::string(bytes.status().message()));
    *out = *bytes;
    return absl::OkStatus();
  }
  return config_error(key_path(key),
                      absl::StrCat("expected a byte size such as 4096 or \"12GiB\", got ", v->dump()));
}

absl::StatusOr<JsonReader> JsonReader::section(const char* key) {
  const nlohmann::json* v = find(key);
  if (!v) return JsonReader(empty_object(), key_path(key));
  if (!v->is_object()) {
    return config_error(key_path(key), absl::StrCat("expected an object, got ", type_of(*v)));
  }
  return JsonReader(*v, key_path(key));
}

absl::Status JsonReader::finish() const {
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (!read_.count(it.key())) {
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", key_path(it.key().c_str()), "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace zerod
