// Chat templates rendered by Jinja as transformers renders them: ids and
// masks against fixtures transformers made (scripts/chat_template_fixtures.py),
// the formats people bring against the messages they stand for, the trained
// roles, examples longer than the window, the ids' offsets, and what is
// refused.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/whole_file.h"
#include "runtime/data/token_shard.h"
#include "runtime/tokenize/chat_template.h"
#include "runtime/tokenize/instruction_data.h"
#include "runtime/tokenize/tokenize_command.h"
#include "tests/temp_dir.h"
#include "tests/tokenizer_fixtures.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using nlohmann::json;

std::string fixtures() { return std::string(ZEROD_SOURCE_DIR) + "/tests/fixtures/"; }

std::unique_ptr<ChatTemplate> open_template(const Tokenizer& tok, const std::string& file,
                                            const ChatTemplateOptions& options) {
  auto chat = open_chat_template(tok, file, options);
  EXPECT_TRUE(chat.ok()) << chat.status();
  return chat.ok() ? *std::move(chat) : nullptr;
}

// For each format, 60 conversations (system turns or none, one to four
// exchanges, non-ASCII, NFC's composing, empty turns) rendered and encoded
// by transformers: the same ids, and the mask transformers'
// return_assistant_tokens_mask gives on the copy of the template marking
// {% generation %}, both from the template as models ship it (the
// assistant's content and its end token found by zerod) and from the
// marked copy (transformers' own rule).
TEST(ChatTemplateFixtures, IdsAndMasksAreTransformers) {
  for (const char* name : {"llama31", "llama32", "mistral_v03", "qwen25", "gemma", "mistral_v03_spm",
                           "mistral_v03_spm_legacy", "mistral_v03_spm_file", "gemma_spm"}) {
    SCOPED_TRACE(name);
    const json fixture = json::parse(*read_whole_file(fixtures() + "chat_templates/" + name + "/cases.json"));
    auto tok = Tokenizer::load(fixtures() + fixture["tokenizer"].get<std::string>());
    ASSERT_TRUE(tok.ok()) << tok.status();
    ChatTemplateOptions options;
    options.date = fixture["date"];
    for (const char* file : {"template.jinja", "tagged.jinja"}) {
      SCOPED_TRACE(file);
      auto chat = open_template(**tok, fixtures() + "chat_templates/" + name + "/" + file, options);
      ASSERT_NE(chat, nullptr);
      EXPECT_EQ(chat->tagged(), std::string(file) == "tagged.jinja");
      const json& cases = fixture["cases"];
      ASSERT_EQ(cases.size(), 60u);
      int64_t trained = 0;
      for (size_t c = 0; c < cases.size(); ++c) {
        SCOPED_TRACE(c);
        auto rendered = chat->render(cases[c]["messages"]);
        ASSERT_TRUE(rendered.ok()) << rendered.status();
        EXPECT_EQ(rendered->text, cases[c]["text"].get<std::string>());
        auto e = chat_example(**tok, *chat, cases[c]["messages"]);
        ASSERT_TRUE(e.ok()) << e.status();
        EXPECT_EQ(e->ids, cases[c]["ids"].get<std::vector<uint32_t>>());
        std::vector<bool> mask;
        for (const int m : cases[c]["mask"]) mask.push_back(m != 0);
        EXPECT_EQ(e->trained, mask);
        trained += std::count(mask.begin(), mask.end(), true);
      }
      EXPECT_GT(trained, 1000);
    }
  }
}

// Llama 3.2's preamble dates itself with strftime_now: the date given, and
// today's where none is.
TEST(ChatTemplateFixtures, TheDatedPreambleIsTheDateGivenOrToday) {
  const json fixture = json::parse(*read_whole_file(fixtures() + "chat_templates/llama32/cases.json"));
  auto tok = Tokenizer::load(fixtures() + fixture["tokenizer"].get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const json messages = fixture["cases"][0]["messages"];
  ChatTemplateOptions options;
  options.date = "2031-02-09";
  auto chat = open_template(**tok, fixtures() + "chat_templates/llama32/template.jinja", options);
  ASSERT_NE(chat, nullptr);
  auto rendered = chat->render(messages);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_NE(rendered->text.find("Today Date: 09 Feb 2031\n"), std::string::npos) << rendered->text;
  chat = open_template(**tok, fixtures() + "chat_templates/llama32/template.jinja", {});
  ASSERT_NE(chat, nullptr);
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "Today Date: %d %b %Y\n", std::localtime(&now));
    return std::string(text);
  };
  const std::string before = today();
  rendered = chat->render(messages);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  const std::string after = today();  // midnight may pass in between
  EXPECT_TRUE(rendered->text.find(before) != std::string::npos || rendered->text.find(after) != std::string::npos)
      << rendered->text;
}

// A template that writes a message elsewhere than its turn: Mistral's puts
// the system message in the last user turn. With the system role trained
// too, every id transformers marks for the assistant stays trained, and
// the system message's ids are trained besides.
TEST(ChatTemplateFixtures, TrainedPartsInTheTextsOrderWhereverTheTemplatePutsThem) {
  const json fixture = json::parse(*read_whole_file(fixtures() + "chat_templates/mistral_v03/cases.json"));
  auto tok = Tokenizer::load(fixtures() + fixture["tokenizer"].get<std::string>());
  ASSERT_TRUE(tok.ok()) << tok.status();
  ChatTemplateOptions options;
  options.trained_roles = {"system", "assistant"};
  options.date = fixture["date"];
  auto chat = open_template(**tok, fixtures() + "chat_templates/mistral_v03/template.jinja", options);
  ASSERT_NE(chat, nullptr);
  int with_system = 0;
  for (const json& c : fixture["cases"]) {
    auto e = chat_example(**tok, *chat, c["messages"]);
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ(e->ids, c["ids"].get<std::vector<uint32_t>>());
    int64_t assistant = 0, trained = 0;
    for (size_t i = 0; i < e->ids.size(); ++i) {
      if (c["mask"][i] == 1) {
        EXPECT_TRUE(e->trained[i]) << "id " << i << " of " << c["text"];
      }
      assistant += c["mask"][i] == 1;
      trained += e->trained[i];
    }
    const std::string system = c["messages"][0]["role"] == "system" ? c["messages"][0]["content"] : "";
    if (system.empty()) continue;
    ++with_system;
    EXPECT_GT(trained, assistant) << c["text"];
  }
  EXPECT_GT(with_system, 10);
}

// Offsets: the ids encode gives, each covering the bytes it stands for,
// the pieces tiling the text; where NFC composes, an id covers the
// original characters it came from.
TEST(TokenOffsets, TileTheTextAndFollowNfc) {
  for (const char* name : {"llama3_bpe", "qwen2_bpe", "gpt2_bpe"}) {
    SCOPED_TRACE(name);
    auto tok = testing::load_tokenizer_fixture(name);
    for (const std::string& text :
         {std::string("Hello <|im_start|>wörld<|eot_id|>\n\n 日本語 été 😀 <|endoftext|>"), std::string()}) {
      auto pieces = tok->encode_pieces(text);
      ASSERT_TRUE(pieces.ok()) << pieces.status();
      std::vector<uint32_t> ids;
      size_t at = 0;
      for (const Tokenizer::Piece& p : *pieces) {
        ids.push_back(p.id);
        EXPECT_EQ(p.begin, at);
        EXPECT_GT(p.end, p.begin);
        at = p.end;
        // Each id's bytes, encoded alone, are that id (where they are whole
        // characters: an id may hold part of one, an emoji's first bytes).
        const std::string bytes = text.substr(p.begin, p.end - p.begin);
        if (first_invalid_utf8(bytes) < 0) {
          EXPECT_EQ(testing::encoded(*tok, bytes, false), std::vector<uint32_t>{p.id}) << bytes;
        }
      }
      EXPECT_EQ(at, text.size());
      EXPECT_EQ(ids, testing::encoded(*tok, text, false));
    }
  }
  // NFC makes "e\u0301" (3 bytes) one character, "é": an id of it covers
  // both of its original characters, never one alone.
  auto qwen = testing::load_tokenizer_fixture("qwen2_bpe");
  const std::string text = "ab e\u0301e\u0301 cd";
  auto pieces = qwen->encode_pieces(text);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_EQ(pieces->size(), testing::encoded(*qwen, "ab éé cd", false).size());
  size_t begin = 0, end = 0;
  for (const Tokenizer::Piece& p : *pieces) {
    EXPECT_TRUE(p.begin != 4 && p.begin != 7) << "an id starting inside e\u0301: " << p.begin;
    EXPECT_TRUE(p.end != 4 && p.end != 7) << "an id ending inside e\u0301: " << p.end;
    EXPECT_GE(p.begin, begin);
    EXPECT_GE(p.end, end);
    EXPECT_LE(p.begin, end) << "a gap before " << p.begin;
    begin = p.begin;
    end = p.end;
  }
  EXPECT_EQ(pieces->front().begin, 0u);
  EXPECT_EQ(end, text.size());
}

// SentencePiece-style BPE (byte fallback): a space stands as '▁' in the id
// holding it, a prepended '▁' stands at the first character, and each
// <0x..> id of a character the vocabulary lacks covers the whole character,
// as `tokenizers`' offsets do: pieces in order, each one's range whole
// characters, the next starting where it starts or ends, and together the
// text.
TEST(TokenOffsets, FollowSpacesPrefixesAndByteFallback) {
  for (const char* name : {"mistral_spm", "llama2_spm_legacy", "spm_file_pipeline", "gemma_spm"}) {
    SCOPED_TRACE(name);
    auto tok = testing::load_tokenizer_fixture(name);
    for (const std::string& text :
         {std::string("Hello [INST] wörld</s>\n\n  日本語 été 😀 <eos>x"), std::string(" lead"), std::string()}) {
      auto pieces = tok->encode_pieces(text);
      ASSERT_TRUE(pieces.ok()) << pieces.status();
      std::vector<uint32_t> ids;
      size_t begin = 0, end = 0;
      for (const Tokenizer::Piece& p : *pieces) {
        ids.push_back(p.id);
        EXPECT_TRUE(p.begin == begin || p.begin == end) << p.begin << " after [" << begin << ", " << end << ")";
        EXPECT_GT(p.end, p.begin);
        EXPECT_LT(first_invalid_utf8(text.substr(p.begin, p.end - p.begin)), 0) << "part of a character";
        begin = p.begin;
        end = p.end;
      }
      EXPECT_EQ(end, text.size());
      EXPECT_EQ(ids, testing::encoded(*tok, text, false));
    }
    // U+10FFFD is in no vocabulary here: its four bytes' ids, each covering it.
    const std::string rare = "a\U0010FFFD";
    auto pieces = tok->encode_pieces(rare);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    ASSERT_GE(pieces->size(), 4u);
    const size_t first = pieces->size() - 4;
    for (size_t k = first; k < pieces->size(); ++k) {
      EXPECT_EQ((*pieces)[k].id, tok->token_id(absl::StrFormat("<0x%02X>", uint8_t(rare[1 + k - first]))));
      EXPECT_EQ((*pieces)[k].begin, 1u);
      EXPECT_EQ((*pieces)[k].end, 5u);
    }
  }
  // Metaspace prepends '▁' at the text's start (LlamaTokenizer), and with
  // `legacy` after each added token too.
  auto mistral = testing::load_tokenizer_fixture("mistral_spm");
  auto legacy = testing::load_tokenizer_fixture("llama2_spm_legacy");
  auto after_inst = [](const Tokenizer& tok) {
    const std::vector<uint32_t> ids = testing::encoded(tok, "[INST]hi", false);
    return std::vector<uint32_t>(ids.begin() + 1, ids.end());
  };
  for (const Tokenizer* tok : {mistral.get(), legacy.get()})
    EXPECT_EQ(testing::encoded(*tok, "hi", false), testing::encoded(*tok, "\u2581hi", false));
  EXPECT_EQ(after_inst(*legacy), testing::encoded(*legacy, "hi", false));
  EXPECT_NE(after_inst(*mistral), testing::encoded(*mistral, "hi", false));
}

class ChatFiles : public testing::TokenizeCommandTest {
 protected:
  // `records` tokenized with the Llama 3 fixture into windows of `seq_len`.
  std::vector<uint32_t> tokenized(const std::string& file, const std::string& records,
                                  std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--tokenizer",       testing::tokenizer_fixture("llama3_bpe"),
                                     "--output",          path(file + ".bin"),
                                     "--seq-len",         "96",
                                     write(file, records)};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(zeroctl(args), 0) << err_.str();
    auto ids = read_token_shard(path(file + ".bin"));
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<uint32_t>();
  }
};

// Alpaca (with and without input, with a system), ShareGPT, and a
// conversation's prompt and completion, in JSONL and in a JSON list as
// `datasets` exports them: the shard the equivalent messages give.
TEST_F(ChatFiles, FormatsPeopleBringAreTheirMessages) {
  const std::string messages =
      R"({"messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}]})"
      "\n"
      R"({"messages": [{"role": "user", "content": "Add them.\n\n2 and 3"}, {"role": "assistant", "content": "5"}]})"
      "\n"
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Café?"}, )"
      R"({"role": "assistant", "content": "Oui — café."}]})"
      "\n";
  const std::vector<uint32_t> want = tokenized("messages.jsonl", messages);
  ASSERT_EQ(want.size(), 3u * 96);
  const std::string alpaca = R"({"instruction": "Name a colour.", "input": "", "output": "Blue."})"
                             "\n"
                             R"({"instruction": "Add them.", "input": "2 and 3", "output": "5"})"
                             "\n"
                             R"({"system": "Be brief.", "instruction": "Café?", "output": "Oui — café."})"
                             "\n";
  EXPECT_EQ(tokenized("alpaca.jsonl", alpaca), want);
  const std::string sharegpt =
      R"({"conversations": [{"from": "human", "value": "Name a colour."}, {"from": "gpt", "value": "Blue."}]})"
      "\n"
      R"({"conversations": [{"from": "human", "value": "Add them.\n\n2 and 3"}, {"from": "gpt", "value": "5"}]})"
      "\n"
      R"({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Café?"}, )"
      R"({"from": "gpt", "value": "Oui — café."}]})"
      "\n";
  EXPECT_EQ(tokenized("sharegpt.jsonl", sharegpt), want);
  const std::string completion =
      R"({"prompt": [{"role": "user", "content": "Name a colour."}], )"
      R"("completion": [{"role": "assistant", "content": "Blue."}]})"
      "\n"
      R"({"prompt": [{"role": "user", "content": "Add them.\n\n2 and 3"}], )"
      R"("completion": [{"role": "assistant", "content": "5"}]})"
      "\n"
      R"({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Café?"}], )"
      R"("completion": [{"role": "assistant", "content": "Oui — café."}]})"
      "\n";
  EXPECT_EQ(tokenized("completion.jsonl", completion), want);
  // A JSON list of the Alpaca records, and JSON lines named .json.
  std::string list = "[\n";
  std::istringstream lines(alpaca);
  for (std::string line; std::getline(lines, line);) absl::StrAppend(&list, list.size() > 2 ? ",\n" : "", line);
  EXPECT_EQ(tokenized("alpaca.json", list + "\n]\n"), want);
  EXPECT_EQ(tokenized("sharegpt.json", sharegpt), want);
}

// --train-roles user,assistant: each user and assistant turn's content and
// its end token trained, the headers and the BOS not.
TEST_F(ChatFiles, TrainedRolesAreTheOnesNamed) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  ChatTemplateOptions options;
  options.trained_roles = {"user", "assistant"};
  auto chat = open_template(*tok, "", options);
  auto e = chat_example(*tok, *chat,
                        json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "2+2?"}},
                                     {{"role", "assistant"}, {"content", "4"}}}));
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<uint32_t> trained;
  for (size_t i = 0; i < e->ids.size(); ++i)
    if (e->trained[i]) trained.push_back(e->ids[i]);
  EXPECT_EQ(trained, testing::encoded(*tok, "2+2?<|eot_id|>4<|eot_id|>", false));

  const std::string records =
      R"({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]})"
      "\n";
  const std::vector<uint32_t> both = tokenized("both.jsonl", records, {"--train-roles", "user,assistant"});
  const std::vector<uint32_t> assistant = tokenized("assistant.jsonl", records);
  auto targets = [](const std::vector<uint32_t>& ids) {
    return std::count_if(ids.begin(), ids.end(), [](uint32_t id) { return !(id & kNotTarget); });
  };
  EXPECT_EQ(targets(assistant), int64_t(testing::encoded(*tok, "4<|eot_id|>", false).size()));
  EXPECT_EQ(targets(both), targets(assistant) + int64_t(testing::encoded(*tok, "2+2?<|eot_id|>", false).size()));
}

// Examples longer than the window: refused by default, naming the line;
// dropped, or truncated to the prompt's start (up to half the window) and
// the response's start; the counts said.
TEST_F(ChatFiles, LongExamplesAreRefusedDroppedOrTruncated) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  std::string long_prompt, long_response;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&long_prompt, "word", i, " ");
  for (int i = 0; i < 40; ++i) absl::StrAppend(&long_response, "answer", i, " ");
  const json records[] = {
      {{"prompt", "Short.\n"}, {"response", "Fine."}},
      {{"prompt", long_prompt}, {"response", long_response}},       // both long: half and half
      {{"prompt", "Short again.\n"}, {"response", long_response}},  // the response takes what the prompt leaves
      {{"prompt", long_prompt}, {"response", "Fine."}},             // the prompt takes what the response leaves
  };
  std::string jsonl;
  for (const json& r : records) jsonl += r.dump() + "\n";
  const std::string file = write("long.jsonl", jsonl);
  const int S = 32;
  auto run = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--tokenizer", testing::tokenizer_fixture("llama3_bpe"),
                                     "--output",    path("long.bin"),
                                     "--seq-len",   std::to_string(S),
                                     file};
    args.insert(args.end(), extra.begin(), extra.end());
    return zeroctl(args);
  };
  const InstructionExample second = *prompt_response_example(*tok, long_prompt, long_response);
  EXPECT_EQ(run({}), 2);
  EXPECT_EQ(err_.str(), absl::StrCat("zeroctl tokenize: ", file, ":2: the example's ", second.ids.size(),
                                     " ids are more than --seq-len 32, its window (an example is never split; "
                                     "--long-examples drop or truncate lets it go)\n"));
  EXPECT_FALSE(std::filesystem::exists(path("long.bin")));

  ASSERT_EQ(run({"--long-examples", "drop"}), 0) << err_.str();
  const InstructionExample first = *prompt_response_example(*tok, "Short.\n", "Fine.");
  auto ids = read_token_shard(path("long.bin"));
  ASSERT_EQ(ids->size(), size_t(S));
  EXPECT_EQ((*ids)[1] & ~kNotTarget, first.ids[1]);
  EXPECT_NE(out_.str().find("3 examples longer than --seq-len 32: 0 truncated, 3 dropped\n"), std::string::npos)
      << out_.str();

  ASSERT_EQ(run({"--long-examples", "truncate"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("3 examples longer than --seq-len 32: 3 truncated, 0 dropped\n"), std::string::npos)
      << out_.str();
  ids = read_token_shard(path("long.bin"));
  ASSERT_EQ(ids->size(), size_t(4 * S));
  // The truncated examples, by hand: the prompt's first ids, then the response's.
  auto prompt_of = [](const InstructionExample& e) {
    return size_t(std::find(e.trained.begin(), e.trained.end(), true) - e.trained.begin());
  };
  const InstructionExample third = *prompt_response_example(*tok, "Short again.\n", long_response);
  const InstructionExample fourth = *prompt_response_example(*tok, long_prompt, "Fine.");
  const size_t fourth_response = fourth.ids.size() - prompt_of(fourth);
  ASSERT_LT(fourth_response, size_t(S / 2));
  for (const auto& [e, window, kept_prompt] :
       {std::tuple{&second, 1, size_t(S / 2)}, std::tuple{&third, 2, prompt_of(third)},
        std::tuple{&fourth, 3, S - fourth_response}}) {
    const size_t p = prompt_of(*e);
    ASSERT_GT(p, 0u);
    ASSERT_LE(kept_prompt, p);
    for (size_t k = 0; k < size_t(S); ++k) {
      const size_t from = k < kept_prompt ? k : p + (k - kept_prompt);
      const bool target = k > 0 && e->trained[from];
      EXPECT_EQ((*ids)[window * S + k], e->ids[from] | (target ? 0 : kNotTarget)) << window << " " << k;
    }
  }
}

// Bad input, each refused before anything is written, naming the file and
// place: a template Jinja cannot compile (the construct named), one that
// refuses the conversation, one not UTF-8, a ShareGPT role it does not
// know, no template, --train-roles empty, a date not of the calendar, no
// python3 with jinja2.
TEST_F(ChatFiles, RefusesBadTemplatesAndRecords) {
  const std::string tok = testing::tokenizer_fixture("llama3_bpe"), out = path("out.bin");
  const std::string chat = write("chat.jsonl", R"({"messages": [{"role": "user", "content": "hi"}, )"
                                               R"({"role": "assistant", "content": "hello"}]})"
                                               "\n");
  auto refused = [&](std::vector<std::string> args, const std::string& message) {
    std::vector<std::string> all = {"--tokenizer", tok, "--output", out, "--seq-len", "64"};
    all.insert(all.end(), args.begin(), args.end());
    EXPECT_EQ(zeroctl(all), 2) << message;
    EXPECT_EQ(err_.str(), "zeroctl tokenize: " + message + "\n");
    EXPECT_FALSE(std::filesystem::exists(out));
  };
  const std::string trans = write("trans.jinja", "{{ bos_token }}\n{% trans %}{{ messages }}{% endtrans %}\n");
  refused({"--chat-template", trans, chat},
          chat + ":1: " + trans + ": the chat template does not compile: line 2: Encountered unknown tag 'trans'.");
  const std::string raises = write("raises.jinja", "{{ raise_exception('only one turn, please') }}");
  refused({"--chat-template", raises, chat},
          chat + ":1: the chat template (" + raises + ") fails on it: only one turn, please");
  const std::string undefined = write("undefined.jinja", "{{ messages[0].content.nosuch() }}");
  refused({"--chat-template", undefined, chat},
          chat + ":1: the chat template (" + undefined + ") fails on it: 'str object' has no attribute 'nosuch'");
  refused({write("bot.jsonl", R"({"conversations": [{"from": "human", "value": "hi"}, )"
                              R"({"from": "bot", "value": "hello"}]})"
                              "\n")},
          path("bot.jsonl") + ":1: conversations[1]: \"from\" is 'bot', not one of human, gpt and system");
  refused({write("alpaca.jsonl", R"({"instruction": "hi", "input": 3, "output": "hello"})"
                                 "\n")},
          path("alpaca.jsonl") + ":1: \"input\" is not a string");
  refused({"--train-roles", ",", chat}, "--train-roles names no role");
  refused({"--chat-template", path("missing.jinja"), chat}, chat + ":1: " + path("missing.jinja") + ": cannot be read");
  EXPECT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("gpt2_bpe"), "--output", out, "--seq-len", "64", chat}),
            2);
  EXPECT_EQ(err_.str(), "zeroctl tokenize: " + chat + ":1: " + testing::tokenizer_fixture("gpt2_bpe") +
                            "/tokenizer.json: the tokenizer has no chat template; give one with --chat-template, or "
                            "prompt and response records\n");
  const std::string latin1 = write("latin1.jinja", "{{ 'caf\xe9' }}");
  refused({"--chat-template", latin1, chat}, chat + ":1: " + latin1 + ": byte 7 is not UTF-8");
  for (const char* date : {"2024-13-01", "2023-02-29", "24-1-1"}) {
    EXPECT_EQ(zeroctl({"--tokenizer", tok, "--output", out, "--template-date", date, chat}), 2) << date;
    EXPECT_NE(err_.str().find("--template-date"), std::string::npos) << err_.str();
    EXPECT_FALSE(std::filesystem::exists(out));
  }

  setenv("ZEROD_PYTHON", path("no-python").c_str(), 1);
  refused({chat}, chat + ":1: chat templates are rendered by " + path("no-python") +
                      " with jinja2, which cannot start: No such file or directory (on Debian: apt-get install "
                      "python3-jinja2)");
  unsetenv("ZEROD_PYTHON");
}

// A template that never ends (loops the sandbox lets run) is stopped at the
// render limit, naming it.
TEST(ChatTemplateLimits, ATemplateThatDoesNotEndIsStopped) {
  auto tok = testing::load_tokenizer_fixture("llama3_bpe");
  ChatTemplateOptions options;
  options.render_limit = std::chrono::seconds(1);
  auto chat = ChatTemplate::open(*tok, "loops.jinja",
                                 "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}"
                                 "{% endfor %}",
                                 options);
  ASSERT_TRUE(chat.ok()) << chat.status();
  auto r = (*chat)->render(json::array({{{"role", "user"}, {"content", "hi"}}}));
  EXPECT_EQ(r.status().message(),
            "loops.jinja: the chat template renders one conversation for more than 1 s; a template that ends takes far "
            "less");
}

// The README's chat path, shortened to 100 steps: ShareGPT conversations
// tokenized with the tokenizer's template and packed, trained with a
// held-out tenth scored every 50 steps, the best checkpoint exported.
TEST_F(ChatFiles, TheReadmesChatPathTrainsAndExportsTheBest) {
  const std::string src = ZEROD_SOURCE_DIR;
  ASSERT_EQ(zeroctl({"--tokenizer", testing::tokenizer_fixture("llama3_bpe"), "--output", path("chat.bin"), "--seq-len",
                     "128", "--pack", src + "/examples/sft-chat.jsonl"}),
            0)
      << err_.str();
  EXPECT_EQ(out_.str().find(path("chat.bin") + ": 800 examples packed into "), 0u) << out_.str();
  const testing::WorkerResult run = testing::run_worker_with(
      {"--config", src + "/examples/sft-chat.json", "--set", "data.path=\"" + path("chat.bin") + "\"", "--set",
       "run.checkpoint.dir=\"" + path("ckpt") + "\"", "--set", "run.steps=100", "--log-format", "json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const std::vector<json> evals = testing::of_kind(testing::events(run.out), "eval");
  ASSERT_EQ(evals.size(), 2u) << run.out;
  EXPECT_EQ(evals[0]["step"], 50);
  EXPECT_EQ(evals[1]["step"], 100);
  EXPECT_TRUE(std::filesystem::exists(path("ckpt/best")));
  const testing::WorkerResult exported =
      testing::run_worker_with({"export", "--checkpoint", path("ckpt/best"), "--out", path("hf")});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_TRUE(std::filesystem::exists(path("hf/model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(path("hf/config.json")));
}

}  // namespace
}  // namespace zerod
