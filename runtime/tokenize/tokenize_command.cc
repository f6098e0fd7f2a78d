#include "runtime/tokenize/tokenize_command.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/config/command_line.h"
#include "runtime/core/exit_codes.h"
#include "runtime/tokenize/tokenize_files.h"

namespace zerod {

int run_tokenize(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "zeroctl tokenize: text, JSONL and JSON into the token files training reads, with a model's own tokenizer "
      "(tokenizer.json's BPE, byte-level or with byte fallback, or a SentencePiece tokenizer.model). A text file "
      "is one document; a JSONL line (or a JSON file's record) is {\"text\"}, or an instruction example: "
      "{\"prompt\", \"response\" or \"completion\"}, {\"messages\"}, ShareGPT's {\"conversations\"} or Alpaca's "
      "{\"instruction\", \"input\", \"output\"}, conversations rendered by the model's chat template (Jinja, by "
      "python3-jinja2), of which only the responses are trained on, each in a window of --seq-len ids, or with "
      "--pack several a window."};
  std::string tokenizer, output;
  std::vector<std::string> inputs;
  TokenizeOptions options;
  app.add_option("--tokenizer", tokenizer,
                 "a model directory (its tokenizer.json, else its tokenizer.model), or one of those files")
      ->required();
  app.add_option("--output", output, "the token file to write")->required();
  app.add_option("--seq-len", options.seq_len,
                 "instruction data and --pack: the window of each example (the job's data.seq_len)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--append-eos", options.append_eos, "documents: the tokenizer's EOS after each");
  app.add_flag("--pack", options.pack,
               "pack examples (or documents, cut to the window) whole, several a window of --seq-len ids, first-fit "
               "decreasing, each marked where it starts");
  std::string long_examples = "refuse";
  app.add_option("--long-examples", long_examples,
                 "an example longer than --seq-len: refuse it (the default), drop it, or truncate it to the window "
                 "keeping its prompt's start (up to half the window) and its response's start")
      ->check(CLI::IsMember({"refuse", "drop", "truncate"}));
  app.add_option("--chat-template", options.chat_template,
                 "a Jinja chat template file, rendering conversations in place of the tokenizer's own");
  std::string roles = "assistant";
  app.add_option("--train-roles", roles,
                 "the roles whose turns are trained on, comma-separated (default assistant; e.g. assistant,user)");
  app.add_option("--template-date", options.chat.date,
                 "the date the template's strftime_now() gives (Llama 3's dated system preamble), YYYY-MM-DD; "
                 "default today, as transformers")
      ->check([](const std::string& d) -> std::string {
        int y, m, day;
        char end;
        if (d.size() != 10 || std::sscanf(d.c_str(), "%4d-%2d-%2d%c", &y, &m, &day, &end) != 3)
          return "not a date YYYY-MM-DD";
        const std::chrono::year_month_day date{std::chrono::year(y), std::chrono::month(unsigned(m)),
                                               std::chrono::day(unsigned(day))};
        return date.ok() ? "" : "not a day of the calendar";
      });
  app.add_option("inputs", inputs, "text files, or JSONL (*.jsonl) and JSON (*.json) files of records")->required();
  if (auto code = parse_command_line(app, "zeroctl tokenize", out, err, [&] { app.parse(argc, argv); })) return *code;

  options.long_examples = long_examples == "drop"       ? LongExamples::kDrop
                          : long_examples == "truncate" ? LongExamples::kTruncate
                                                        : LongExamples::kRefuse;
  options.chat.trained_roles = absl::StrSplit(roles, ',', absl::SkipEmpty());
  auto fail = [&](const absl::Status& s) {
    err << "zeroctl tokenize: " << s.message() << "\n";
    return exit_code_for(s);
  };
  if (options.chat.trained_roles.empty()) return fail(absl::InvalidArgumentError("--train-roles names no role"));
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
  if (t->truncated + t->dropped > 0)
    out << absl::StrFormat("%s longer than --seq-len %d: %d truncated, %d dropped\n",
                           count(t->truncated + t->dropped, "example"), options.seq_len, t->truncated, t->dropped);
  return 0;
}

}  // namespace zerod
