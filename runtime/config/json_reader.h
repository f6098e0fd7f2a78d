// Reads one JSON object of the job config, remembering which keys were read
// so that finish() can reject the rest by their full key path.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"

namespace zerod {

class JsonReader {
 public:
  // `obj` must outlive the reader. `path` is the key path of obj ("" for the root).
  JsonReader(const nlohmann::json& obj, std::string path);

  // Each read leaves `out` unchanged when the key is absent or null.
  absl::Status read(const char* key, int64_t* out);
  absl::Status read(const char* key, int* out);
  absl::Status read(const char* key, double* out);
  absl::Status read(const char* key, bool* out);
  absl::Status read(const char* key, std::string* out);
  absl::Status read(const char* key, std::optional<std::string>* out);
  absl::Status read(const char* key, std::optional<int64_t>* out);
  // A byte count: integer or a string such as "12GiB".
  absl::Status read_bytes(const char* key, std::optional<uint64_t>* out);
  // A nested object (an absent or null key reads as an empty object).
  absl::StatusOr<JsonReader> section(const char* key);
  bool has(const char* key) const;
  // The raw value, marking the key as read (nullptr when absent).
  const nlohmann::json* raw(const char* key);

  // Fails naming the first key that no read asked for.
  absl::Status finish() const;

  // "a.b.key" for errors about a value this reader holds.
  std::string key_path(const char* key) const;

 private:
  const nlohmann::json* find(const char* key);
  template <class T>
  absl::Status read_optional(const char* key, std::optional<T>* out);

  const nlohmann::json* obj_;
  std::string path_;
  std::set<std::string> read_;
};

// Bad value at `path`: "<path>: <what>".
absl::Status config_error(const std::string& path, const std::string& what);

}  // namespace zerod
