#include "runtime/tokenize/tokenize_command.h"

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/config/command_line.h"
#include "runtime/core/exit_codes.h"
#include "runtime/tokenize/tokenize_files.h"

namespace zerod {

int run_tokenize(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "zeroctl tokenize: text and JSONL into the token files training reads, with a model's own tokenizer (byte-level "
      "BPE from tokenizer.json, or a SentencePiece tokenizer.model). A text file is one document; a JSONL line is "
      "{\"text\"}, or an instruction example {\"prompt\", \"response\"} or {\"messages\"} of which only the "
      "responses are trained on, each in a window of --seq-len ids, or with --pack several a window."};
  std::string tokenizer, output;
  std::vector<std::string> inputs;
  TokenizeOptions options;
  app.add_option("--tokenizer", tokenizer, "a model directory, or its tokenizer.json or tokenizer.model")->required();
  app.add_option("--output", output, "the token file to write")->required();
  app.add_option("--seq-len", options.seq_len,
                 "instruction data and --pack: the window of each example (the job's data.seq_len)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--append-eos", options.append_eos, "documents: the tokenizer's EOS after each");
  app.add_flag("--pack", options.pack,
               "pack examples (or documents, cut to the window) whole, several a window of --seq-len ids, first-fit "
               "decreasing, each marked where it starts");
  app.add_option("inputs", inputs, "text files, or JSONL files (*.jsonl)")->required();
  if (auto code = parse_command_line(app, "zeroctl tokenize", out, err, [&] { app.parse(argc, argv); })) return *code;

  auto fail = [&](const absl::Status& s) {
    err << "zeroctl tokenize: " << s.message() << "\n";
    return exit_code_for(s);
  };
  auto tok = Tokenizer::load(tokenizer);
  if (!tok.ok()) return fail(tok.status());
  auto t = tokenize_files(**tok, inputs, options);
  if (!t.ok()) return fail(t.status());
  if (absl::Status s = write_tokenized(output, *t, (*tok)->vocab_size()); !s.ok()) return fail(s);
  auto count = [](int64_t n, const char* what) { return absl::StrCat(n, " ", what, n == 1 ? "" : "s"); };
  if (t->packed) {
    const std::string what = t->examples > 0 ? count(t->examples, "example") : count(t->documents, "document");
    out << absl::StrFormat("%s: %s packed into %s of %d ids (fill %.1f%%), %d ids, %d of them targets (%.1f%%)\n",
                           output, what, count(t->windows, "window"), t->window, 100.0 * t->fill, t->ids.size(),
                           t->targets, 100.0 * t->targets / t->ids.size());
  } else if (t->window > 0) {
    out << absl::StrFormat("%s: %s in windows of %d ids, %d ids, %d of them targets (%.1f%%)\n", output,
                           count(t->examples, "example"), t->window, t->ids.size(), t->targets,
                           100.0 * t->targets / t->ids.size());
  } else {
    out << absl::StrFormat("%s: %s, %d ids of %d bits\n", output, count(t->documents, "document"), t->ids.size(),
                           (*tok)->vocab_size() > 65536 ? 32 : 16);
  }
  return 0;
}

}  // namespace zerod
