// `zeroctl tokenize`: text and JSONL turned into token files with a model's
// own tokenizer (runtime/tokenize/tokenize_files.h); needs no zerod.
#pragma once

#include <ostream>

namespace zerod {

// Exit status 0, or 2 with the error on `err` and nothing written.
int run_tokenize(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
