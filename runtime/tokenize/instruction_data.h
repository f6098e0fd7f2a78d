// Instruction data as token ids with a loss mask: a prompt and its response,
// or a conversation rendered by its chat template, where only the response
// (the turns of the trained roles) is trained on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenize/chat_template.h"
#include "runtime/tokenize/tokenizer.h"

namespace zerod {

// One example: its ids and, for each, whether it is a target the loss counts.
struct InstructionExample {
  std::vector<uint32_t> ids;
  std::vector<bool> trained;
};

// The ids of prompt + response as the tokenizer encodes them with its
// special tokens, then its EOS (unless those end in it already). The response's ids and the EOS are trained:
// those past the longest run the ids share with the prompt's own encoding.
absl::StatusOr<InstructionExample> prompt_response_example(const Tokenizer& tok, std::string_view prompt,
                                                           std::string_view response);

// The conversation (a list of message objects) as `chat` renders it,
// encoded as transformers' apply_chat_template(tokenize=True) encodes it:
// the text without the tokenizer's own special tokens around it. Trained:
// where the template marks {% generation %} and only the assistant is
// trained, the ids transformers' return_assistant_tokens_mask marks (each
// whose bytes touch such a block); else the ids touching each trained
// message's content as rendered and the added token that ends its turn,
// right after it (<|eot_id|>, <|im_end|>, </s>). A conversation with no
// message of a trained role is refused.
absl::StatusOr<InstructionExample> chat_example(const Tokenizer& tok, ChatTemplate& chat,
                                                const nlohmann::json& messages);

}  // namespace zerod
