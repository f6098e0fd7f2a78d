// The tokenizers of tests/fixtures/tokenizers (scripts/tokenizer_fixtures.py)
// and their ids, for the tokenizer and instruction data tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/tokenize/tokenizer.h"

namespace zerod::testing {

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(ZEROD_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name;
}

inline std::unique_ptr<Tokenizer> load_tokenizer_fixture(const std::string& name) {
  auto tok = Tokenizer::load(tokenizer_fixture(name));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

// tok.encode's ids, or none (and a failure) where it fails.
inline std::vector<uint32_t> encoded(const Tokenizer& tok, std::string_view text, bool add_special) {
  auto ids = tok.encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *std::move(ids) : std::vector<uint32_t>();
}

}  // namespace zerod::testing
