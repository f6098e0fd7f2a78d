// Tokenizers and `zeroctl tokenize`'s inputs: the input cut at NULs into a
// tokenizer.json, its tokenizer_config.json (empty: none), a text and a
// JSONL file; the tokenizer, where it loads, encodes the text and turns
// the JSONL into documents or examples (windows of 16 ids).
#include "fuzz/fuzz_input.h"
#include "runtime/tokenize/tokenize_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = zerod::fuzz::split_at_nul(data, size, 4);
  if (parts.size() != 4) return 0;
  const std::string dir = zerod::fuzz::scratch_dir() + "/tokenizer";
  std::filesystem::remove_all(dir);
  zerod::fuzz::write_scratch("tokenizer/tokenizer.json", parts[0]);
  if (!parts[1].empty()) zerod::fuzz::write_scratch("tokenizer/tokenizer_config.json", parts[1]);
  absl::StatusOr<std::unique_ptr<zerod::Tokenizer>> tok = zerod::Tokenizer::load(dir);
  if (!tok.ok()) return 0;
  absl::StatusOr<std::vector<uint32_t>> ids = (*tok)->encode(parts[2], true);
  for (uint32_t id : ids.ok() ? *ids : std::vector<uint32_t>()) {
    if (id >= (*tok)->vocab_size()) __builtin_trap();
  }
  const std::string jsonl = zerod::fuzz::write_scratch("tokenizer/data.jsonl", parts[3]);
  zerod::tokenize_files(**tok, {jsonl}, {.seq_len = 16}).IgnoreError();
  zerod::tokenize_files(**tok, {jsonl}, {.seq_len = 16, .pack = true}).IgnoreError();
  return 0;
}
