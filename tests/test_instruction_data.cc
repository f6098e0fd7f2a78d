// Instruction data: chat templates rendered as transformers renders them,
// the loss mask over the responses counted exactly, the files `zeroctl
// tokenize` writes and what it refuses.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/dataset.h"
#include "runtime/data/token_shard.h"
#include "runtime/tokenize/instruction_data.h"
#include "runtime/tokenize/pack_windows.h"
#include "runtime/tokenize/tokenize_command.h"
#include "runtime/tokenize/tokenize_files.h"
#include "tests/temp_dir.h"
#include "tests/tokenizer_fixtures.h"

namespace zerod {
namespace {

using nlohmann::json;

std::vector<uint32_t> concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The ids the mask marks trained, in order.
std::vector<uint32_t> trained_ids(const InstructionExample& e) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < e.ids.size(); ++i)
    if (e.trained[i]) out.push_back(e.ids[i]);
  return out;
}

// The tokenizer's own chat template, started.
std::unique_ptr<ChatTemplate> template_of(const Tokenizer& tok, const ChatTemplateOptions& options = {}) {
  auto chat = open_chat_template(tok, "", options);
  EXPECT_TRUE(chat.ok()) << chat.status();
  return chat.ok() ? *std::move(chat) : nullptr;
}

// A user's question and the assistant's answer.
json exchange(const std::string& question, const std::string& answer) {
  return json::array({{{"role", "user"}, {"content", question}}, {{"role", "assistant"}, {"content", answer}}});
}

// Each conversation of the fixture, rendered by transformers'
// apply_chat_template with the fixture's template: the same ids; and the
// trained ones are exactly each assistant turn's own encoding with its end
// token, in order.
TEST(ChatTemplates, RenderAsTransformersDoesAndTrainOnlyTheAssistant) {
  for (const auto& [name, end] : {std::pair{"llama3_bpe", "<|eot_id|>"}, std::pair{"qwen2_bpe", "<|im_end|>"}}) {
    SCOPED_TRACE(name);
    auto tok = testing::load_tokenizer_fixture(name);
    const json expected = json::parse(*read_whole_file(testing::tokenizer_fixture(name) + "/expected.json"));
    ASSERT_EQ(expected["chats"].size(), 2u);
    for (const json& chat : expected["chats"]) {
      std::vector<uint32_t> want_trained;
      for (const json& m : chat["messages"]) {
        std::string content = m["content"];
        if (std::string(name) == "llama3_bpe") {  // the template trims
          content.erase(0, content.find_first_not_of(" \n"));
          content.erase(content.find_last_not_of(" \n") + 1);
        }
        if (m["role"] == "assistant") want_trained = concat(want_trained, testing::encoded(*tok, content + end, false));
      }
      auto e = chat_example(*tok, *template_of(*tok), chat["messages"]);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(e->ids, chat["ids"].get<std::vector<uint32_t>>());
      EXPECT_EQ(trained_ids(*e), want_trained);
    }
  }
}

// The ids of prompt + response with the tokenizer's BOS, then its EOS; the
// response (whose first piece starts after the prompt's newline) and the
// EOS trained, nothing else.
TEST(PromptResponse, TrainsTheResponseAndTheEos) {
  for (const char* name : {"llama3_bpe", "qwen2_bpe", "gpt2_bpe", "llama2_sp"}) {
    SCOPED_TRACE(name);
    auto tok = testing::load_tokenizer_fixture(name);
    const std::string prompt = "Question: what is 12+30?\n", response = "Answer: 42, сорок два.";
    auto e = prompt_response_example(*tok, prompt, response);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->ids, concat(testing::encoded(*tok, prompt + response, true), {*tok->eos()}));
    const std::vector<uint32_t> head = testing::encoded(*tok, prompt, true);
    ASSERT_EQ(std::vector<uint32_t>(e->ids.begin(), e->ids.begin() + head.size()), head);
    for (size_t i = 0; i < e->ids.size(); ++i) EXPECT_EQ(e->trained[i], i >= head.size()) << i;
  }
}

TEST(ChatTemplates, RefusesWhatTheyCannotRender) {
  auto sp = testing::load_tokenizer_fixture("llama2_sp");
  EXPECT_EQ(open_chat_template(*sp, "", {}).status().message(),
            testing::tokenizer_fixture("llama2_sp") +
                "/tokenizer.model: the tokenizer has no chat template; give one with --chat-template, or prompt and "
                "response records");
  auto llama3 = testing::load_tokenizer_fixture("llama3_bpe");
  auto chat = template_of(*llama3);
  EXPECT_EQ(
      chat_example(*llama3, *chat,
                   json::array({{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}))
          .status()
          .message(),
      "the conversation has no assistant message to train on");
}

class TokenizerDir : public testing::TempDirTest {
 protected:
  // The SentencePiece fixture's model with `config` as its tokenizer_config.json.
  std::unique_ptr<Tokenizer> sentencepiece_with(const std::string& config) {
    std::filesystem::copy_file(testing::tokenizer_fixture("llama2_sp") + "/tokenizer.model", path("tokenizer.model"));
    write("tokenizer_config.json", config);
    auto tok = Tokenizer::load(dir_.string());
    EXPECT_TRUE(tok.ok()) << tok.status();
    return tok.ok() ? *std::move(tok) : nullptr;
  }
};

// A SentencePiece model keeps no offsets of its ids, which the mask of a
// rendered chat needs: refused, naming the file.
TEST_F(TokenizerDir, ASentencePieceModelMasksNoChat) {
  auto tok = sentencepiece_with(R"({"eos_token": "</s>", "chat_template": "{{ messages[0].content }}"})");
  auto chat = template_of(*tok);
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat_example(*tok, *chat, exchange("hi", "hello")).status().message(),
            path("tokenizer.model") +
                ": a SentencePiece model keeps no offsets of its ids, which a chat template's loss mask needs; give "
                "the model's tokenizer.json");
}

// A tokenizer that ends every text with its EOS (add_eos_token): one EOS,
// trained, after the response.
TEST_F(TokenizerDir, TheEosIsNotAddedTwice) {
  auto tok = sentencepiece_with(R"({"bos_token": "<s>", "eos_token": "</s>", "add_eos_token": true})");
  auto e = prompt_response_example(*tok, "Q\n", "A");
  ASSERT_TRUE(e.ok()) << e.status();
  const std::vector<uint32_t> whole = testing::encoded(*tok, "Q\nA", true);
  ASSERT_EQ(whole.back(), 2u);
  EXPECT_EQ(e->ids, whole);
  EXPECT_TRUE(e->trained.back());
  EXPECT_FALSE(e->trained[0]);
}

using TokenizeFiles = testing::TokenizeCommandTest;

// Three examples, one a window of 48 ids: each example's ids, flagged as
// its mask says (never the window's first), then EOS padding, flagged; the
// count of targets is the trained ids' count; the loader gives the same
// targets with -1 for the rest.
TEST_F(TokenizeFiles, LaysInstructionExamplesOutOneAWindowWithTheirMask) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  const std::string jsonl = write(
      "sft.jsonl",
      "{\"prompt\": \"Name a colour.\\n\", \"response\": \"Blue.\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}\n"
      "{\"prompt\": \"Say ok\\n\", \"response\": \"ok — d'accord\"}\n");
  std::vector<InstructionExample> examples = {*prompt_response_example(*tok, "Name a colour.\n", "Blue."),
                                              *chat_example(*tok, *template_of(*tok), exchange("2+2?", "4")),
                                              *prompt_response_example(*tok, "Say ok\n", "ok — d'accord")};
  const int S = 48;
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("llama3_bpe"), "--output", path("sft.bin"), "--seq-len",
                     "48", jsonl}),
            0)
      << err_.str();
  auto ids = read_token_shard(path("sft.bin"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 3u * S);
  int64_t targets = 0;
  for (size_t x = 0; x < examples.size(); ++x) {
    const InstructionExample& e = examples[x];
    ASSERT_LE(e.ids.size(), size_t(S));
    for (size_t k = 0; k < size_t(S); ++k) {
      const uint32_t got = (*ids)[x * S + k];
      if (k >= e.ids.size()) {
        EXPECT_EQ(got, *tok->eos() | kNotTarget);
        continue;
      }
      const bool target = k > 0 && e.trained[k];
      EXPECT_EQ(got, e.ids[k] | (target ? 0 : kNotTarget)) << x << " " << k;
      targets += target;
    }
  }
  // Counted by hand from the encodings: "Blue." and " — d'accord"... are
  // the responses; each trained id is its response's or the end token.
  const int64_t by_hand =
      int64_t(testing::encoded(*tok, "Blue.", false).size() + 1 + testing::encoded(*tok, "4<|eot_id|>", false).size() +
              testing::encoded(*tok, "ok — d'accord", false).size() + 1);
  EXPECT_EQ(targets, by_hand);
  EXPECT_EQ(out_.str(), absl::StrCat(path("sft.bin"), ": 3 examples in windows of 48 ids, 144 ids, ", by_hand,
                                     " of them targets (", absl::StrFormat("%.1f", 100.0 * by_hand / 144), "%)\n"));

  DataConfig cfg{DataKind::kTokens, path("sft.bin"), S, 1, {}, {}};
  auto ds = load_dataset(cfg, int(tok->vocab_size()));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ds->windowed);
  EXPECT_EQ(*dataset_windows(cfg), 3);
  auto loader = DataLoader::create(&ds->tokens, S, 9, 0, 1, MemoryAccountant::global(), true);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int32_t> in(3 * S), tg(3 * S);
  EXPECT_EQ(loader->next_batch(3, in.data(), tg.data()), by_hand);
  int64_t counted = 0;
  for (int b = 0; b < 3; ++b) {
    const auto first = std::find_if(examples.begin(), examples.end(), [&](const InstructionExample& e) {
      return int32_t(e.ids[0]) == in[b * S] && int32_t(e.ids[1]) == in[b * S + 1];
    });
    ASSERT_NE(first, examples.end());
    for (int t = 0; t < S; ++t) {
      const bool target = t + 1 < int(first->ids.size()) && first->trained[t + 1];
      EXPECT_EQ(tg[b * S + t], target ? int32_t(first->ids[t + 1]) : -1);
      EXPECT_EQ(in[b * S + t], int32_t(size_t(t) < first->ids.size() ? first->ids[t] : *tok->eos()));
      counted += target;
    }
  }
  EXPECT_EQ(counted, by_hand);

  // Laid out for another seq_len, or mixed with plain shards: refused.
  cfg.seq_len = 32;
  EXPECT_EQ(load_dataset(cfg, int(tok->vocab_size())).status().message(),
            absl::StrCat("data file '", path("sft.bin"),
                         "': its examples were laid out for seq_len 48, the job's data.seq_len is 32 (zeroctl "
                         "tokenize --seq-len)"));
  ASSERT_TRUE(write_token_shard(path("zz.bin"), std::vector<uint16_t>(100, 7)).ok());
  cfg = {DataKind::kTokens, path("*.bin"), S, 1, {}, {}};
  EXPECT_EQ(load_dataset(cfg, int(tok->vocab_size())).status().message(),
            absl::StrCat("data file '", path("zz.bin"),
                         "': a plain token shard among windowed ones; one dataset holds one kind"));
}

// An example of exactly --seq-len ids fills its window, its last id (the
// EOS) a target; one with nothing to train on (an empty prompt and response
// where the tokenizer has no BOS: its EOS is the window's first id) is refused.
TEST_F(TokenizeFiles, AnExampleMayFillItsWindowButMustTrainOnSomething) {
  auto tok = testing::load_tokenizer_fixture("qwen2_bpe");
  auto e = prompt_response_example(*tok, "Name it.\n", "Blue.");
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string n = std::to_string(e->ids.size());
  const std::string jsonl = write("one.jsonl", "{\"prompt\": \"Name it.\\n\", \"response\": \"Blue.\"}\n");
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("qwen2_bpe"), "--output", path("one.bin"), "--seq-len",
                     n, jsonl}),
            0)
      << err_.str();
  auto ids = read_token_shard(path("one.bin"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), e->ids.size());
  EXPECT_EQ(ids->back(), *tok->eos());  // a target: no flag

  const std::string empty = write("empty.jsonl", "{\"prompt\": \"\", \"response\": \"\"}\n");
  EXPECT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("qwen2_bpe"), "--output", path("e.bin"), "--seq-len",
                     "8", empty}),
            2);
  EXPECT_EQ(err_.str(), "zeroctl tokenize: " + empty + ":1: the example has no id to train on\n");
  EXPECT_FALSE(std::filesystem::exists(path("e.bin")));
}

// Documents: each file, or each {"text"} line, encoded with the BOS, one
// after another; 16-bit ids for a vocabulary that fits.
TEST_F(TokenizeFiles, WritesDocumentsAsOneStream) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  const std::string a = "Первый документ.\nWith two lines.\n", b = "Second — 第二.", c = "third";
  write("a.txt", a);
  write("b.jsonl", absl::StrCat("{\"text\": \"", b, "\"}\n{\"text\": \"", c, "\"}\n"));
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("llama3_bpe"), "--output", path("docs.bin"),
                     "--append-eos", path("a.txt"), path("b.jsonl")}),
            0)
      << err_.str();
  const uint32_t eos = *tok->eos();
  const std::vector<uint32_t> want = concat(
      concat(concat(concat(concat(testing::encoded(*tok, a, true), {eos}), testing::encoded(*tok, b, true)), {eos}),
             testing::encoded(*tok, c, true)),
      {eos});
  EXPECT_EQ(*read_token_shard(path("docs.bin")), want);
  EXPECT_EQ(std::filesystem::file_size(path("docs.bin")), 1024 + 2 * want.size());  // 16-bit ids
  EXPECT_EQ(out_.str(), absl::StrCat(path("docs.bin"), ": 3 documents, ", want.size(), " ids of 16 bits\n"));
}

// Bad input: exit 2, the file and line named, nothing written.
TEST_F(TokenizeFiles, RefusesBadInputNamingTheFileAndLineAndWritesNothing) {
  const std::string tok = testing::tokenizer_fixture("llama3_bpe"), out = path("out.bin");
  auto refused = [&](const std::vector<std::string>& inputs, const std::string& message,
                     std::vector<std::string> extra = {"--seq-len", "64"}) {
    std::vector<std::string> args = {"--tokenizer", tok, "--output", out};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), inputs.begin(), inputs.end());
    EXPECT_EQ(zeroctl(args), 2) << message;
    EXPECT_EQ(err_.str(), "zeroctl tokenize: " + message + "\n");
    EXPECT_FALSE(std::filesystem::exists(out));
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  };
  const std::string good = "{\"prompt\": \"p\", \"response\": \"r\"}\n";
  const std::string bad = write("bad.jsonl", good + "{\"prompt\": \"p\", \"response\": \n");
  EXPECT_EQ(zeroctl({"--tokenizer", tok, "--output", out, "--seq-len", "64", bad}), 2);
  EXPECT_EQ(err_.str().find("zeroctl tokenize: " + bad + ":2 is not valid JSON: "), 0u) << err_.str();
  EXPECT_FALSE(std::filesystem::exists(out));

  refused({write("a.jsonl", good + "[1, 2]\n")}, path("a.jsonl") + ":2: not a JSON object");
  refused({write("b.jsonl", "{\"question\": \"q\"}\n")},
          path("b.jsonl") +
              ":1: a record holds \"text\"; \"prompt\" and \"response\" or \"completion\"; \"messages\"; "
              "\"conversations\" (ShareGPT); or \"instruction\" and \"output\" (Alpaca)");
  refused({write("c.jsonl", "{\"prompt\": \"p\", \"response\": 4}\n")},
          path("c.jsonl") + ":1: \"response\" is not a string");
  refused({write("d.jsonl", good + "{\"text\": \"t\"}\n")},
          path("d.jsonl") + ":2: a document among instruction examples (one output holds one kind)");
  refused({write("e.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\n")},
          path("e.jsonl") + ":1: messages[0]: \"content\" is not a string");
  refused({write("f.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n")},
          path("f.jsonl") + ":1: the conversation has no assistant message to train on");
  const size_t n =
      prompt_response_example(*testing::load_tokenizer_fixture("llama3_bpe"), "a longer prompt\n", "and its response")
          ->ids.size();
  refused({write("g.jsonl", "{\"prompt\": \"a longer prompt\\n\", \"response\": \"and its response\"}\n")},
          absl::StrCat(path("g.jsonl"), ":1: the example's ", n,
                       " ids are more than --seq-len 4, its window (an example is never split; --long-examples drop "
                       "or truncate lets it go)"),
          {"--seq-len", "4"});
  refused({write("h.jsonl", good)},
          path("h.jsonl") +
              ":1: instruction data needs --seq-len, the window each example is "
              "laid out in",
          {});
  refused({write("i.txt", "ok \xff\xfe")}, path("i.txt") + ": byte 3 is not UTF-8");
  refused({write("j.jsonl", "\n\n")}, "the inputs hold no document or example");
  refused({path("missing.txt")}, path("missing.txt") + ": cannot be read");

  // A tokenizer of an unknown kind, or none.
  EXPECT_EQ(zeroctl({"--tokenizer", write("vocab.txt", "a b\n"), "--output", out, path("i.txt")}), 2);
  EXPECT_EQ(err_.str(), "zeroctl tokenize: " + path("vocab.txt") +
                            ": not a kind of tokenizer zerod reads (tokenizer.json or a SentencePiece .model)\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

// ---- packing (--pack) ----

// First-fit decreasing the slow way: documents longest first (equal ones
// in input order), each into the first open window it fits, trying them
// all in order, else into a new window.
std::vector<std::vector<int64_t>> naive_first_fit_decreasing(const std::vector<int>& lengths, int T) {
  std::vector<std::pair<int, int64_t>> order;  // (-length, index): sorts longest first, then by index
  for (size_t i = 0; i < lengths.size(); ++i) order.push_back({-lengths[i], int64_t(i)});
  std::sort(order.begin(), order.end());
  std::vector<std::vector<int64_t>> windows;
  std::vector<int> used;
  for (const auto& [minus, d] : order) {
    size_t w = 0;
    while (w < windows.size() && used[w] + lengths[d] > T) ++w;
    if (w == windows.size()) {
      windows.emplace_back();
      used.push_back(0);
    }
    windows[w].push_back(d);
    used[w] += lengths[d];
  }
  return windows;
}

// `n` lengths drawn log-normally (median 250, sigma 0.8), clamped to [1, T].
std::vector<int> log_normal_lengths(size_t n, int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> draw(std::log(250.0), 0.8);
  std::vector<int> lengths(n);
  for (int& l : lengths) l = std::clamp(int(std::lround(draw(rng))), 1, T);
  return lengths;
}

// The segment tree's packing is the naive loop's, window for window and in
// the same order within each; at T 2048 it fills at least 95% of the ids.
TEST(PackWindows, IsTheNaiveFirstFitDecreasing) {
  for (const int T : {1024, 2048}) {
    SCOPED_TRACE(T);
    const std::vector<int> lengths = log_normal_lengths(2000, T, 17);
    const auto packed = pack_windows(lengths, T);
    EXPECT_EQ(packed, naive_first_fit_decreasing(lengths, T));
    const int64_t ids = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    const double fill = double(ids) / double(packed.size() * T);
    std::printf("T %d: 2000 lengths, %zu windows, fill %.4f\n", T, packed.size(), fill);
    if (T == 2048) {
      EXPECT_GE(fill, 0.95);
    }
  }
  EXPECT_TRUE(pack_windows({}, 8).empty());
  EXPECT_EQ(pack_windows({3, 8, 5, 3, 1, 8}, 8),
            (std::vector<std::vector<int64_t>>{{1}, {5}, {2, 0}, {3, 4}}));  // worked by hand
}

// 100,000 lengths, log-normal and the edges (all 1, all T): every
// document in exactly one window, none over T, no window empty.
TEST(PackWindows, EveryDocumentWholeInExactlyOneWindow) {
  const int T = 2048;
  for (const std::vector<int>& lengths :
       {log_normal_lengths(100000, T, 5), std::vector<int>(100000, 1), std::vector<int>(1000, T)}) {
    const auto start = std::chrono::steady_clock::now();
    const auto packed = pack_windows(lengths, T);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%zu documents into %zu windows in %.3f s\n", lengths.size(), packed.size(), seconds);
    std::vector<int> seen(lengths.size(), 0);
    for (const std::vector<int64_t>& docs : packed) {
      ASSERT_FALSE(docs.empty());
      int64_t used = 0;
      for (const int64_t d : docs) {
        ASSERT_LT(size_t(d), lengths.size());
        ++seen[d];
        used += lengths[d];
      }
      EXPECT_LE(used, T);
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), int64_t(lengths.size()));
  }
}

// What a packed shard of `docs` (each's ids flagged as the packer flags
// them) laid out in `windows` of T holds: each window's documents in
// order, then EOS padding whose first id starts a document.
std::vector<uint32_t> packed_layout(const std::vector<std::vector<uint32_t>>& docs,
                                    const std::vector<std::vector<int64_t>>& windows, int T, uint32_t eos) {
  std::vector<uint32_t> ids;
  for (const std::vector<int64_t>& w : windows) {
    const size_t first = ids.size();
    for (const int64_t d : w) ids.insert(ids.end(), docs[d].begin(), docs[d].end());
    if (ids.size() == first + T) continue;
    ids.push_back(eos | kNotTarget | kDocStart);
    while (ids.size() < first + T) ids.push_back(eos | kNotTarget);
  }
  return ids;
}

// A packed shard's documents, split at its flags window by window, without
// their flags; the padding ones (all EOS, none a target) left out.
std::vector<std::vector<uint32_t>> documents_of(const std::vector<uint32_t>& ids, int T, uint32_t eos) {
  std::vector<std::vector<uint32_t>> docs;
  std::vector<bool> padding;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(i % T != 0 || (ids[i] & kDocStart)) << "window " << i / T << " does not start a document";
    if (i % T == 0 || (ids[i] & kDocStart)) {
      docs.emplace_back();
      padding.push_back(true);
    }
    docs.back().push_back(ids[i] & ~(kDocStart | kNotTarget));
    padding.back() = padding.back() && (ids[i] & ~kDocStart) == (eos | kNotTarget);
  }
  std::vector<std::vector<uint32_t>> kept;
  for (size_t d = 0; d < docs.size(); ++d)
    if (!padding[d]) kept.push_back(docs[d]);
  return kept;
}

// Sixty examples packed into windows of 128 ids: the shard is the naive
// first-fit decreasing layout of the examples flagged as their masks say
// (each's first id a document start, never a target), version 2 with its
// count of starts; split at its flags it holds each example whole exactly
// once; the output line states the windows, fill and targets; and it loads
// packed, its targets counted as written.
TEST_F(TokenizeFiles, PacksInstructionExamplesWholeIntoWindows) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  const uint32_t eos = *tok->eos();
  const int T = 128;
  const std::vector<std::string> words = {"red", "blue", "cat", "sun", "tree", "sky", "one", "two", "dog", "sea"};
  std::mt19937 rng(3);
  std::string jsonl;
  std::vector<InstructionExample> examples;
  for (int x = 0; x < 60; ++x) {
    std::string prompt = absl::StrCat("Question ", x, ":"), response;
    for (int k = 1 + int(rng() % 8); k > 0; --k) absl::StrAppend(&prompt, " ", words[rng() % words.size()]);
    prompt += "\n";
    for (int k = 1 + int(rng() % 16); k > 0; --k) absl::StrAppend(&response, words[rng() % words.size()], " ");
    jsonl += json{{"prompt", prompt}, {"response", response}}.dump() + "\n";
    examples.push_back(*prompt_response_example(*tok, prompt, response));
    ASSERT_LE(examples.back().ids.size(), size_t(T));
  }
  std::vector<std::vector<uint32_t>> flagged;
  std::vector<int> lengths;
  int64_t targets = 0, filled = 0;
  for (const InstructionExample& e : examples) {
    flagged.emplace_back();
    for (size_t k = 0; k < e.ids.size(); ++k) {
      const bool target = k > 0 && e.trained[k];
      flagged.back().push_back(e.ids[k] | (target ? 0 : kNotTarget) | (k == 0 ? kDocStart : 0));
      targets += target;
    }
    lengths.push_back(int(e.ids.size()));
    filled += int64_t(e.ids.size());
  }
  const auto windows = naive_first_fit_decreasing(lengths, T);
  const std::vector<uint32_t> want = packed_layout(flagged, windows, T, eos);

  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("llama3_bpe"), "--output", path("p.bin"), "--seq-len",
                     "128", "--pack", write("sft.jsonl", jsonl)}),
            0)
      << err_.str();
  auto ids = read_token_shard(path("p.bin"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, want);
  EXPECT_LT(windows.size(), examples.size() / 2) << "packing saved nothing";
  const std::string bytes = *read_whole_file(path("p.bin"));
  auto header = [&](int i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= uint32_t(uint8_t(bytes[4 * i + b])) << (8 * b);
    return int32_t(v);
  };
  EXPECT_EQ(header(1), 2);
  EXPECT_EQ(header(3), T);
  EXPECT_EQ(header(4), std::count_if(want.begin(), want.end(), [](uint32_t id) { return (id & kDocStart) != 0; }));

  std::vector<std::vector<uint32_t>> got = documents_of(*ids, T, eos), expected;
  for (const InstructionExample& e : examples) expected.push_back(e.ids);
  std::sort(got.begin(), got.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(got, expected) << "each example whole, exactly once";

  const int64_t all = int64_t(windows.size()) * T;
  EXPECT_EQ(out_.str(),
            absl::StrFormat("%s: 60 examples packed into %d windows of 128 ids (fill %.1f%%), %d ids, %d of them "
                            "targets (%.1f%%)\n",
                            path("p.bin"), windows.size(), 100.0 * filled / all, all, targets, 100.0 * targets / all));

  DataConfig cfg{DataKind::kTokens, path("p.bin"), T, 1, {}, {}};
  auto ds = load_dataset(cfg, int(tok->vocab_size()));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ds->packed);
  auto loader = DataLoader::create(&ds->tokens, T, 9, 0, 1, MemoryAccountant::global(), true, true);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int B = int(windows.size());
  std::vector<int32_t> in(B * T), tg(B * T), pos(B * T);
  EXPECT_EQ(loader->next_batch(B, in.data(), tg.data(), pos.data()), targets);
}

// Documents packed: each encoded with its BOS and the EOS after it, cut
// into pieces of at most the window, each piece a document trained on all
// its ids but its first, laid out first-fit decreasing.
TEST_F(TokenizeFiles, PacksDocumentsCuttingThoseLongerThanTheWindow) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  const uint32_t eos = *tok->eos();
  const int T = 16;
  const std::string a = "A longer document, of many more words than sixteen ids can hold; it is cut in pieces.",
                    b = "Second — 第二.", c = "third";
  write("a.txt", a);
  write("b.jsonl", absl::StrCat("{\"text\": \"", b, "\"}\n{\"text\": \"", c, "\"}\n"));
  std::vector<std::vector<uint32_t>> pieces;
  std::vector<int> lengths;
  int64_t targets = 0;
  for (const std::string& text : {a, b, c}) {
    std::vector<uint32_t> ids = testing::encoded(*tok, text, true);
    ids.push_back(eos);
    for (size_t from = 0; from < ids.size(); from += T) {
      pieces.emplace_back();
      for (size_t k = from; k < std::min(ids.size(), from + T); ++k)
        pieces.back().push_back(ids[k] | (k == from ? kDocStart | kNotTarget : 0));
      lengths.push_back(int(pieces.back().size()));
      targets += int64_t(pieces.back().size()) - 1;
    }
  }
  ASSERT_GE(pieces.size(), 5u) << "the first document is cut";
  const auto windows = naive_first_fit_decreasing(lengths, T);
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("llama3_bpe"), "--output", path("d.bin"), "--seq-len",
                     "16", "--pack", "--append-eos", path("a.txt"), path("b.jsonl")}),
            0)
      << err_.str();
  EXPECT_EQ(*read_token_shard(path("d.bin")), packed_layout(pieces, windows, T, eos));
  const int64_t all = int64_t(windows.size()) * T, filled = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  EXPECT_EQ(out_.str(),
            absl::StrFormat("%s: 3 documents packed into %d windows of 16 ids (fill %.1f%%), %d ids, %d of them "
                            "targets (%.1f%%)\n",
                            path("d.bin"), windows.size(), 100.0 * filled / all, all, targets, 100.0 * targets / all));
}

// --pack without --seq-len, and an example longer than the window (never
// split): exit 2, the reason (and the file and line), nothing written.
TEST_F(TokenizeFiles, PackRefusesWhatItCannotPack) {
  const std::string tok = testing::tokenizer_fixture("llama3_bpe"), out = path("out.bin");
  const std::string good = "{\"prompt\": \"p\", \"response\": \"r\"}\n";
  const std::string sft = write("sft.jsonl", good), text = write("t.txt", "some text");
  for (const std::string& input : {sft, text}) {
    EXPECT_EQ(zeroctl({"--tokenizer", tok, "--output", out, "--pack", input}), 2);
    EXPECT_EQ(err_.str(),
              "zeroctl tokenize: --pack needs --seq-len, the window documents and examples are packed into\n");
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  const std::string longer =
      write("long.jsonl", good + "{\"prompt\": \"a longer prompt\\n\", \"response\": \"and its response\"}\n");
  const size_t n =
      prompt_response_example(*testing::load_tokenizer_fixture("llama3_bpe"), "a longer prompt\n", "and its response")
          ->ids.size();
  ASSERT_GT(n, 8u);
  EXPECT_EQ(zeroctl({"--tokenizer", tok, "--output", out, "--seq-len", "8", "--pack", longer}), 2);
  EXPECT_EQ(err_.str(), absl::StrCat("zeroctl tokenize: ", longer, ":2: the example's ", n,
                                     " ids are more than --seq-len 8, its window (an example is never split; "
                                     "--long-examples drop or truncate lets it go)\n"));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  // Truncated to the window, it packs as a window of its own.
  ASSERT_EQ(
      zeroctl({"--tokenizer", tok, "--output", out, "--seq-len", "8", "--pack", "--long-examples", "truncate", longer}),
      0)
      << err_.str();
  EXPECT_NE(out_.str().find("2 examples packed into 2 windows of 8 ids"), std::string::npos) << out_.str();
  EXPECT_NE(out_.str().find("1 example longer than --seq-len 8: 1 truncated, 0 dropped\n"), std::string::npos)
      << out_.str();
}

#ifdef ZEROD_CTL_BIN
// `zeroctl tokenize` runs zero-tokenize in its place: the same file, and
// exit 2 for bad input.
TEST_F(TokenizeFiles, ZeroctlRunsZeroTokenize) {
  write("p.jsonl", "{\"prompt\": \"a\\n\", \"response\": \"b c\"}\n");
  auto ctl = [&](const std::string& output, const std::string& input) {
    const std::string cmd =
        absl::StrCat(ZEROD_CTL_BIN, " tokenize --tokenizer ", testing::tokenizer_fixture("qwen2_bpe"), " --output ",
                     output, " --seq-len 8 ", input, " >", path("log"), " 2>&1");
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(ctl(path("p.bin"), path("p.jsonl")), 0) << *read_whole_file(path("log"));
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("qwen2_bpe"), "--output", path("q.bin"), "--seq-len",
                     "8", path("p.jsonl")}),
            0);
  EXPECT_EQ(*read_whole_file(path("p.bin")), *read_whole_file(path("q.bin")));
  EXPECT_EQ(ctl(path("r.bin"), path("missing.jsonl")), 2);
  EXPECT_EQ(*read_whole_file(path("log")), "zeroctl tokenize: " + path("missing.jsonl") + ": cannot be read\n");
}
#endif

}  // namespace
}  // namespace zerod
