// Tokenizers and `zeroctl tokenize`'s inputs: the input cut at NULs into a
// tokenizer.json, its tokenizer_config.json (empty: none), a text and a
// JSONL file; the tokenizer, where it loads, encodes the text (its ids'
// offsets checked) and turns the JSONL into documents or examples (windows
// of 16 ids).
#include "fuzz/fuzz_input.h"
#include "runtime/tokenize/tokenize_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Chat templates are rendered by Jinja in a python3 of their own, not
  // this fuzzer's to explore: conversations fail at once, starting none.
  static const bool no_python = setenv("ZEROD_PYTHON", "/nonexistent/zerod-fuzz-python", 1) == 0;
  (void)no_python;
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
  // The ids are encode's; their offsets cover a UTF-8 text in order, with
  // no gap (they tile it but where NFC widened two ids to one character).
  absl::StatusOr<std::vector<zerod::Tokenizer::Piece>> pieces = (*tok)->encode_pieces(parts[2]);
  absl::StatusOr<std::vector<uint32_t>> plain = (*tok)->encode(parts[2], false);
  if (pieces.ok() && plain.ok() && zerod::first_invalid_utf8(parts[2]) < 0) {
    if (pieces->size() != plain->size()) __builtin_trap();
    size_t begin = 0, end = 0;
    for (size_t k = 0; k < pieces->size(); ++k) {
      const zerod::Tokenizer::Piece& p = (*pieces)[k];
      if (p.id != (*plain)[k] || p.begin < begin || p.begin > end || p.end < end || p.end <= p.begin) __builtin_trap();
      begin = p.begin;
      end = p.end;
    }
    if (end != parts[2].size()) __builtin_trap();
  }
  const std::string jsonl = zerod::fuzz::write_scratch("tokenizer/data.jsonl", parts[3]);
  zerod::TokenizeOptions options;
  options.seq_len = 16;
  zerod::tokenize_files(**tok, {jsonl}, options).IgnoreError();
  options.pack = true;
  zerod::tokenize_files(**tok, {jsonl}, options).IgnoreError();
  return 0;
}
