// A SentencePiece model (Llama 2's and Mistral's tokenizer.model), encoded
// by Debian's libsentencepiece itself. add_special puts the BOS (and the
// EOS) around the text as tokenizer_config.json's add_bos_token and
// add_eos_token say, true and false when it does not. Control tokens
// written in the text ("</s>") stay text, as sentencepiece has them.
#pragma once

#include <memory>
#include <string>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

absl::StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path,
                                                                        TokenizerConfig config);

}  // namespace zerod
