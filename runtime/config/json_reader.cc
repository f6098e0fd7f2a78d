#include "runtime/config/json_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/config/deepspeed_keys.h"
#include "runtime/core/memory.h"

namespace zerod {
namespace {

const nlohmann::json& empty_object() {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return kEmpty;
}

}  // namespace

void ConfigReading::add(const std::string& path, const std::string& what) {
  add_text(path, absl::StrCat(path, ": ", what));
}

void ConfigReading::add_text(const std::string& path, std::string text) {
  problems_.emplace_back(path, std::move(text));
}

absl::Status ConfigReading::status() const {
  if (problems_.empty()) return absl::OkStatus();
  std::vector<std::pair<std::string, std::string>> sorted = problems_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (sorted.size() == 1) return absl::InvalidArgumentError(sorted[0].second);
  std::string text = absl::StrCat(sorted.size(), " problems:");
  for (const auto& [path, line] : sorted) absl::StrAppend(&text, "\n  ", line);
  return absl::InvalidArgumentError(text);
}

const nlohmann::json* ConfigReading::fill(const std::string& path, bool* at_default) {
  if (fill_) {
    if (std::optional<nlohmann::json> v = fill_(path)) {
      values_.push_back(*std::move(v));
      note_filled(path, values_.back());
      return &values_.back();
    }
  }
  // DeepSpeed itself reads "auto" in zero_optimization as the default.
  if (path.starts_with("zero_optimization.")) {
    *at_default = true;
    return nullptr;
  }
  add(path, absl::StrCat("\"auto\" is a value the Hugging Face Trainer fills in; zerod fills in only the keys "
                         "docs/config.md lists, and not this one here: give a value (--set ",
                         path, "=...)"));
  return nullptr;
}

JsonReader::JsonReader(const nlohmann::json& obj, std::string path, ConfigReading& reading)
    : obj_(&obj), path_(std::move(path)), reading_(&reading) {}

std::string JsonReader::key_path(const char* key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

bool JsonReader::has(const char* key) const {
  auto it = obj_->find(key);
  return it != obj_->end() && !it->is_null();
}

bool JsonReader::is_auto(const char* key) const {
  auto it = obj_->find(key);
  return it != obj_->end() && *it == "auto";
}

const nlohmann::json* JsonReader::find(const char* key, bool* at_default) {
  read_.insert(key);
  auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  // "auto" is the Hugging Face Trainer's to fill in, except where zerod
  // gives the word a meaning of its own.
  const std::string path = key_path(key);
  if (*it == "auto" && path != "run.device" && path != "zero_optimization.micro_batch_grads" &&
      path != "zero_optimization.accumulation") {
    bool def = false;
    const nlohmann::json* v = reading_->fill(path, &def);
    if (at_default) *at_default = def;
    return v;
  }
  return &*it;
}

const nlohmann::json* JsonReader::raw(const char* key) { return find(key); }

bool JsonReader::check(bool ok, const char* key, const std::string& what) {
  if (!ok) problem(key, what);
  return ok;
}

void JsonReader::problem(const char* key, const std::string& what) { reading_->add(key_path(key), what); }

void JsonReader::note_filled(const char* key, nlohmann::json value) {
  read_.insert(key);
  reading_->note_filled(key_path(key), std::move(value));
}

const nlohmann::json* JsonReader::fetch(const char* key, const nlohmann::json& current) {
  bool at_default = false;
  const nlohmann::json* v = find(key, &at_default);
  if (at_default) reading_->note_filled(key_path(key), current);
  return v;
}

// Reads a number into *out.
template <class T>
bool JsonReader::read_number(const char* key, T* out) {
  const nlohmann::json* v = fetch(key, *out);
  if (!v) return true;
  if constexpr (std::is_same_v<T, double>) {
    if (!v->is_number()) return check(false, key, absl::StrCat("expected a number, got ", v->dump()));
    *out = v->get<double>();
    return true;
  } else {
    if (v->is_number_integer()) {
      *out = v->get<int64_t>();
      return true;
    }
    // DeepSpeed configs often write integers as floats (5e8).
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
        *out = static_cast<int64_t>(d);
        return true;
      }
    }
    return check(false, key, absl::StrCat("expected an integer, got ", v->dump()));
  }
}

bool JsonReader::read(const char* key, int64_t* out) { return read_number(key, out); }

bool JsonReader::read(const char* key, double* out) { return read_number(key, out); }

bool JsonReader::read(const char* key, int* out) {
  int64_t v = *out;
  if (!read(key, &v)) return false;
  if (!check(v >= INT32_MIN && v <= INT32_MAX, key, absl::StrCat("value ", v, " is out of range"))) return false;
  *out = static_cast<int>(v);
  return true;
}

bool JsonReader::read(const char* key, bool* out) {
  const nlohmann::json* v = fetch(key, *out);
  if (!v) return true;
  if (!v->is_boolean()) return check(false, key, absl::StrCat("expected true or false, got ", v->dump()));
  *out = v->get<bool>();
  return true;
}

bool JsonReader::read(const char* key, std::string* out) {
  const nlohmann::json* v = fetch(key, *out);
  if (!v) return true;
  if (!v->is_string()) return check(false, key, absl::StrCat("expected a string, got ", v->dump()));
  *out = v->get<std::string>();
  return true;
}

template <class T>
bool JsonReader::read_optional(const char* key, std::optional<T>* out) {
  if (!has(key)) {
    find(key);  // an explicit null counts as read
    return true;
  }
  if (is_auto(key)) {
    // Only DeepSpeed's own rule applies to these: "auto" is the default (none).
    bool at_default = false;
    const nlohmann::json* v = find(key, &at_default);
    if (at_default) reading_->note_filled(key_path(key), nullptr);
    if (!v) return at_default;
    const bool fits = std::is_same_v<T, std::string> ? v->is_string() : v->is_number_integer();
    if (!check(fits, key, absl::StrCat("\"auto\" filled in as ", v->dump(), ", which does not fit"))) return false;
    *out = v->get<T>();
    return true;
  }
  T v{};
  if (!read(key, &v)) return false;
  *out = std::move(v);
  return true;
}

bool JsonReader::read(const char* key, std::optional<std::string>* out) { return read_optional(key, out); }

bool JsonReader::read(const char* key, std::optional<int64_t>* out) { return read_optional(key, out); }

bool JsonReader::read_bytes(const char* key, std::optional<uint64_t>* out) {
  const nlohmann::json* v = find(key);
  if (!v) return true;
  if (v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0)) {
    *out = v->get<uint64_t>();
    return true;
  }
  if (v->is_string()) {
    auto bytes = parse_byte_size(v->get<std::string>());
    if (!bytes.ok()) return check(false, key, std::string(bytes.status().message()));
    *out = *bytes;
    return true;
  }
  return check(false, key, absl::StrCat("expected a byte size such as 4096 or \"12GiB\", got ", v->dump()));
}

JsonReader JsonReader::section(const char* key) {
  const nlohmann::json* v = find(key);
  if (v && !v->is_object()) problem(key, absl::StrCat("expected an object, got ", v->type_name()));
  return JsonReader(v && v->is_object() ? *v : empty_object(), key_path(key), *reading_);
}

namespace {

// A key no read asked for, by DeepSpeed's table: accepted, refused off its
// default, or unknown (a section zerod knows is judged key by key).
void judge(ConfigReading& reading, const std::string& path, const nlohmann::json& value) {
  if (value.is_null()) return;
  if (const DeepSpeedKey* k = find_deepspeed_key(path)) {
    switch (k->use) {
      case KeyUse::kNoEffect:
        return;
      case KeyUse::kDefaultOnly:
        if (is_deepspeed_default(*k, value)) return;
        // A section is named, not printed.
        reading.add(path, absl::StrCat(value.is_object() ? "" : value.dump() + " ", "asks for ", k->what,
                                       ", which zerod does not do",
                                       std::string_view(k->default_json) == "null"
                                           ? ""
                                           : absl::StrCat(" (DeepSpeed's default ", k->default_json, " is accepted)")));
        return;
      case KeyUse::kHonoured:
        reading.add(path, "is not used with the rest of this config");
        return;
    }
  }
  if (value.is_object() && has_deepspeed_keys_under(path)) {
    for (const auto& [key, v] : value.items()) judge(reading, absl::StrCat(path, ".", key), v);
    return;
  }
  reading.add_text(path, absl::StrCat("unknown key '", path, "'"));
}

}  // namespace

void JsonReader::finish_unjudged() {
  for (const auto& [key, value] : obj_->items()) read_.insert(key);
}

void JsonReader::finish() {
  for (const auto& [key, value] : obj_->items()) {
    if (!read_.count(key)) judge(*reading_, key_path(key.c_str()), value);
  }
}

}  // namespace zerod
