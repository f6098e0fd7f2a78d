// The tokenizers of tests/fixtures/tokenizers (scripts/tokenizer_fixtures.py)
// and their ids, and zeroctl tokenize run in-process, for the tokenizer,
// instruction data and chat template tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/tokenize/tokenize_command.h"
#include "runtime/tokenize/tokenizer.h"
#include "tests/temp_dir.h"

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

// A directory to tokenize in, and zeroctl tokenize run in this process.
class TokenizeCommandTest : public TempDirTest {
 protected:
  // Its exit status; its output on out_ and err_.
  int zeroctl(std::vector<std::string> args) {
    args.insert(args.begin(), "tokenize");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    out_.str("");
    err_.str("");
    return run_tokenize(int(argv.size()), argv.data(), out_, err_);
  }
  std::ostringstream out_, err_;
};

}  // namespace zerod::testing
