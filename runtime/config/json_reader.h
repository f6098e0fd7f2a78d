// Reads the job config's JSON objects, gathering every problem instead of
// stopping at the first, so that one run reports them all; remembers which
// keys were read so that finish() can judge the rest by DeepSpeed's key
// table (deepspeed_keys.h); and fills in "auto" values.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace zerod {

// What one reading of a config found: its problems, and the values it
// filled in for "auto".
class ConfigReading {
 public:
  // The value a config's "auto" stands for at a key path; nullopt when
  // nothing derives it.
  using AutoFill = std::function<std::optional<nlohmann::json>(const std::string& path)>;

  explicit ConfigReading(AutoFill fill = {}) : fill_(std::move(fill)) {}

  // "<path>: <what>".
  void add(const std::string& path, const std::string& what);
  // A problem in words of its own, sorted under `path`.
  void add_text(const std::string& path, std::string text);
  bool ok() const { return problems_.empty(); }
  // InvalidArgument listing every problem, sorted by key path; OK when none.
  absl::Status status() const;

  // The "auto" values filled in, in the order they were read: (path, value).
  const std::vector<std::pair<std::string, nlohmann::json>>& filled() const { return filled_; }

 private:
  friend class JsonReader;
  // The value of "auto" at `path`, kept for the reader; nullptr when nothing
  // derives it (a problem is recorded) or it stays at the default
  // (`at_default`).
  const nlohmann::json* fill(const std::string& path, bool* at_default);
  void note_filled(const std::string& path, nlohmann::json value) { filled_.emplace_back(path, std::move(value)); }

  AutoFill fill_;
  std::vector<std::pair<std::string, std::string>> problems_;  // (path, text)
  std::vector<std::pair<std::string, nlohmann::json>> filled_;
  std::deque<nlohmann::json> values_;  // filled values the readers point at
};

class JsonReader {
 public:
  // `obj` and `reading` must outlive the reader. `path` is the key path of
  // obj ("" for the root).
  JsonReader(const nlohmann::json& obj, std::string path, ConfigReading& reading);

  // Each read leaves `out` unchanged when the key is absent or null, or when
  // its value is refused; returns false when it records a problem.
  bool read(const char* key, int64_t* out);
  bool read(const char* key, int* out);
  bool read(const char* key, double* out);
  bool read(const char* key, bool* out);
  bool read(const char* key, std::string* out);
  bool read(const char* key, std::optional<std::string>* out);
  bool read(const char* key, std::optional<int64_t>* out);
  // A byte count: integer or a string such as "12GiB".
  bool read_bytes(const char* key, std::optional<uint64_t>* out);
  // A nested object (an absent or null key, or one that is not an object,
  // reads as an empty object; the latter is a problem).
  JsonReader section(const char* key);
  bool has(const char* key) const;
  // Whether the key's value is "auto".
  bool is_auto(const char* key) const;
  // The raw value, marking the key as read (nullptr when absent; "auto"
  // filled in).
  const nlohmann::json* raw(const char* key);

  // Records a problem at the key unless ok; returns ok.
  bool check(bool ok, const char* key, const std::string& what);
  // Records a problem about the key's value.
  void problem(const char* key, const std::string& what);
  // Notes that the caller filled in the key's "auto" with `value`.
  void note_filled(const char* key, nlohmann::json value);

  // Judges every key no read asked for: DeepSpeed's keys by their row of the
  // table, the rest as unknown.
  void finish();
  // Takes every key as read: they belong to something already refused (an
  // optimizer's parameters when zerod does not have the optimizer).
  void finish_unjudged();

  // "a.b.key" for errors about a value this reader holds.
  std::string key_path(const char* key) const;

 private:
  const nlohmann::json* find(const char* key, bool* at_default = nullptr);
  // The key's value, as find; "auto" left at the default notes `current`.
  const nlohmann::json* fetch(const char* key, const nlohmann::json& current);
  template <class T>
  bool read_optional(const char* key, std::optional<T>* out);
  template <class T>
  bool read_number(const char* key, T* out);

  const nlohmann::json* obj_;
  std::string path_;
  ConfigReading* reading_;
  std::set<std::string> read_;
};

}  // namespace zerod
