// Which class transformers 5 (AutoTokenizer) reads a tokenizer.json through,
// which decides whether a byte-fallback BPE's steps are the file's own or
// the class's (metaspace_pipeline.h): the hub's class (tokenizer_config.json's
// tokenizer_class, else config.json's) unless config.json's model_type is
// registered to a backend (the file's steps: Mistral, Phi-3) or to another
// class that overrides the hub's.
#pragma once

#include <string>

namespace zerod {

struct TokenizerConfig;

// The class without its "Fast", or empty where the file's own steps are
// read (TokenizersBackend); "?" where it is the class a model type is
// registered to, one this table does not name (where no class is named, or
// the type's overrides the hub's).
std::string transformers_class(const TokenizerConfig& config);

}  // namespace zerod
