// What zerod does with every key of a DeepSpeed config (DeepSpeed's
// configuration reference and its code's defaults): the one table the config
// reader judges unread keys by and docs/config.md's key table is printed from.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace zerod {

enum class KeyUse {
  kHonoured,     // read, with DeepSpeed's meaning (job_config.cc)
  kNoEffect,     // accepted at any value: it changes nothing in zerod's result
  kDefaultOnly,  // accepted at DeepSpeed's default; another value asks for what zerod does not do
};

struct DeepSpeedKey {
  const char* path;  // dotted; "a.*" stands for every key below a that has no row of its own
  KeyUse use;
  const char* default_json;  // kDefaultOnly: DeepSpeed's default as JSON ("null": absent)
  const char* what;          // what zerod does with it, or the feature it asks for
};

std::span<const DeepSpeedKey> deepspeed_keys();

// The row for a key path: its own, else that of its nearest "prefix.*";
// nullptr when the table does not know it.
const DeepSpeedKey* find_deepspeed_key(std::string_view path);

// Whether the table has rows below `path` (it is a section zerod knows).
bool has_deepspeed_keys_under(std::string_view path);

// Whether `value` is the row's default: equal as JSON, numbers by value
// (5e8 is 500000000), and "auto" (DeepSpeed and the Hugging Face Trainer
// leave such a value at the default when nothing fills it).
bool is_deepspeed_default(const DeepSpeedKey& key, const nlohmann::json& value);

// The table as Markdown, for docs/config.md (tests/test_deepspeed_configs.cc
// checks it is there; ZEROD_DOCS_RECORD=1 writes it).
std::string deepspeed_keys_markdown();

}  // namespace zerod
