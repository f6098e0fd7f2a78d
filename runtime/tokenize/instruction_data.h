// Instruction data as token ids with a loss mask: a prompt and its response,
// or a conversation rendered in its tokenizer's chat format, where only the
// response (the assistant's turns) is trained on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenize/tokenizer.h"

namespace zerod {

// One example: its ids and, for each, whether it is a target the loss counts.
struct InstructionExample {
  std::vector<uint32_t> ids;
  std::vector<bool> trained;
};

// The chat formats zerod renders, recognized in a chat template by their
// markers: Llama 3's headers (<|start_header_id|>role<|end_header_id|>\n\n
// content, trimmed, <|eot_id|>, after the BOS) and ChatML (Qwen2's:
// <|im_start|>role\ncontent<|im_end|>\n), whose tokens the vocabulary must
// have. Not written: the dated system preamble of Llama 3.1's templates,
// nor the default system turn Qwen2's write where a conversation has none
// (give it in the data).
enum class ChatFormat { kNone, kLlama3, kChatMl };
ChatFormat chat_format_of(const std::string& chat_template);

struct ChatMessage {
  std::string role, content;
};

// The ids of prompt + response as the tokenizer encodes them with its
// special tokens, then its EOS (unless those end in it already). The response's ids and the EOS are trained:
// those past the longest run the ids share with the prompt's own encoding.
absl::StatusOr<InstructionExample> prompt_response_example(const Tokenizer& tok, std::string_view prompt,
                                                           std::string_view response);

// The conversation as the tokenizer's chat template renders it, encoded as
// transformers' apply_chat_template(tokenize=True) encodes it; each
// assistant turn's content and the token that ends it are trained. A
// conversation with no assistant turn, or a tokenizer whose template is not
// one of chat_format_of's, is refused.
absl::StatusOr<InstructionExample> chat_example(const Tokenizer& tok, const std::vector<ChatMessage>& messages);

}  // namespace zerod
