// zerod's tokenizers against Hugging Face's own ids: tests/fixtures/tokenizers
// holds small tokenizers of each kind the Llama family ships, trained by
// scripts/tokenizer_fixtures.py on the generated corpus of
// tests/tokenizer_corpus.h, and what `tokenizers` (and sentencepiece) made
// of that corpus and of edge cases.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/crc32c.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "runtime/data/token_shard.h"
#include "runtime/tokenize/tokenize_command.h"
#include "runtime/tokenize/tokenizer.h"
#include "runtime/tokenize/transformers_class.h"
#include "tests/temp_dir.h"
#include "tests/tokenizer_corpus.h"
#include "tests/tokenizer_fixtures.h"

namespace zerod {
namespace {

using nlohmann::json;

json expected_of(const std::string& name) {
  auto j = parse_strict_json(*read_whole_file(testing::tokenizer_fixture(name) + "/expected.json"), name);
  EXPECT_TRUE(j.ok()) << j.status();
  return *j;
}

uint32_t crc_of_ids(const uint32_t* ids, size_t n) {  // of the ids as little-endian uint32, as the fixture's
  return crc32c(ids, n * sizeof(uint32_t));
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

// The whole 1 MiB corpus as one text, with the special tokens: the count, the
// CRC of every 4096 ids (so that a difference is found near where it is)
// and the first ids.
TEST_P(TokenizerFixture, EncodesTheMultiScriptCorpusAsTransformersDoes) {
  const json e = expected_of(GetParam());
  const std::string corpus = testing::tokenizer_corpus();
  ASSERT_EQ(corpus.size(), e["corpus_bytes"].get<size_t>());
  ASSERT_EQ(crc32c(corpus.data(), corpus.size()), e["corpus_crc32c"].get<uint32_t>())
      << "tests/tokenizer_corpus.h no longer makes scripts/tokenizer_corpus.py's bytes";
  ASSERT_GE(corpus.size(), size_t(1) << 20);

  auto tok = Tokenizer::load(testing::tokenizer_fixture(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<uint32_t> ids = testing::encoded(**tok, corpus, true);
  const json& want = e["corpus_ids"];
  const size_t block = e["block"].get<size_t>();
  for (size_t b = 0; b < want["block_crc32c"].size(); ++b) {
    const size_t first = b * block, n = std::min(block, ids.size() - std::min(ids.size(), first));
    ASSERT_EQ(crc_of_ids(ids.data() + first, n), want["block_crc32c"][b].get<uint32_t>())
        << "ids [" << first << ", " << first + block << ") differ";
  }
  EXPECT_EQ(ids.size(), want["count"].get<size_t>());
  EXPECT_EQ(crc_of_ids(ids.data(), ids.size()), want["crc32c"].get<uint32_t>());
  EXPECT_EQ(std::vector<uint32_t>(ids.begin(), ids.begin() + want["first"].size()),
            want["first"].get<std::vector<uint32_t>>());
  for (uint32_t id : ids) ASSERT_LT(id, (*tok)->vocab_size());
}

// Empty and blank text, every kind of space, contractions in both cases,
// digits, composed and decomposed accents, each script, emoji sequences,
// added tokens written in the text, and code points at the edges. Where
// transformers' conversion of a SentencePiece model differs from
// sentencepiece itself, zerod (which is sentencepiece) gives sentencepiece's.
TEST_P(TokenizerFixture, EncodesEdgeCasesAsTransformersDoes) {
  auto tok = Tokenizer::load(testing::tokenizer_fixture(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const json expected = expected_of(GetParam());  // held: a range over a temporary's member dangles
  int cases = 0;
  for (const json& c : expected["cases"]) {
    ++cases;
    const std::string text = c["text"].get<std::string>();
    const char* plain = c.contains("reference_ids") ? "reference_ids" : "ids";
    const char* special = c.contains("reference_ids") ? "reference_ids_with_special" : "ids_with_special";
    EXPECT_EQ(testing::encoded(**tok, text, false), c[plain].get<std::vector<uint32_t>>()) << "'" << text << "'";
    EXPECT_EQ(testing::encoded(**tok, text, true), c[special].get<std::vector<uint32_t>>()) << "'" << text << "'";
    if (!c.contains("offsets")) continue;  // the byte-fallback kinds': tokenizers' own, in bytes
    auto pieces = (*tok)->encode_pieces(text);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    std::vector<std::vector<size_t>> offsets;
    for (const Tokenizer::Piece& p : *pieces) offsets.push_back({p.begin, p.end});
    EXPECT_EQ(offsets, c["offsets"].get<std::vector<std::vector<size_t>>>()) << "'" << text << "'";
  }
  EXPECT_GE(cases, 26);
}

INSTANTIATE_TEST_SUITE_P(Kinds, TokenizerFixture,
                         ::testing::Values("llama3_bpe", "qwen2_bpe", "gpt2_bpe", "llama2_sp", "mistral_spm",
                                           "llama2_spm_legacy", "spm_file_pipeline", "gemma_spm"));

// `zeroctl tokenize` of the corpus as a text file writes those ids: one
// document, 16-bit ids for these vocabularies.
class TokenizeCorpus : public testing::TempDirTest {};

TEST_F(TokenizeCorpus, ZeroctlWritesTransformersIds) {
  const std::string corpus = write("corpus.txt", testing::tokenizer_corpus());
  for (const char* name : {"llama3_bpe", "llama2_sp"}) {
    SCOPED_TRACE(name);
    std::string args[] = {"tokenize", "--tokenizer", testing::tokenizer_fixture(name),
                          "--output", path("c.bin"), corpus};
    char* argv[std::size(args)];
    for (size_t i = 0; i < std::size(args); ++i) argv[i] = args[i].data();
    std::ostringstream out, err;
    ASSERT_EQ(run_tokenize(int(std::size(args)), argv, out, err), 0) << err.str();
    auto ids = read_token_shard(path("c.bin"));
    ASSERT_TRUE(ids.ok()) << ids.status();
    const json want = expected_of(name)["corpus_ids"];
    EXPECT_EQ(ids->size(), want["count"].get<size_t>());
    EXPECT_EQ(crc_of_ids(ids->data(), ids->size()), want["crc32c"].get<uint32_t>());
    EXPECT_EQ(out.str(), absl::StrCat(path("c.bin"), ": 1 document, ", ids->size(), " ids of 16 bits\n"));
  }
}

TEST(Tokenizer, ReadsSpecialTokensAndTheChatTemplateFromTheConfig) {
  auto llama3 = Tokenizer::load(testing::tokenizer_fixture("llama3_bpe"));
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ((*llama3)->bos(), (*llama3)->token_id("<|begin_of_text|>"));
  EXPECT_EQ((*llama3)->eos(), (*llama3)->token_id("<|eot_id|>"));
  EXPECT_TRUE((*llama3)->bos().has_value());
  EXPECT_NE((*llama3)->config().chat_template.find("<|start_header_id|>"), std::string::npos);
  EXPECT_EQ((*llama3)->source(), testing::tokenizer_fixture("llama3_bpe") + "/tokenizer.json");

  auto sp = Tokenizer::load(testing::tokenizer_fixture("llama2_sp"));
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ((*sp)->bos(), 1u);
  EXPECT_EQ((*sp)->eos(), 2u);
  EXPECT_EQ((*sp)->token_id("no such piece"), std::nullopt);
  EXPECT_EQ((*sp)->vocab_size(), 2500);
  EXPECT_TRUE((*sp)->config().chat_template.empty());
}

// The class transformers 5.24's AutoTokenizer reads a tokenizer.json
// through (each pair seen there): the hub's, unless config.json's
// model_type is registered to a backend (the file's own steps) or to a
// class that overrides the hub's ("?": one zerod has no table of).
TEST(TransformersClass, FollowsTheHubsClassAndTheModelType) {
  const struct {
    const char *hub, *model_type, *read_as;
  } cases[] = {
      {"LlamaTokenizer", "", "LlamaTokenizer"},
      {"LlamaTokenizer", "llama", "LlamaTokenizer"},
      {"LlamaTokenizer", "mistral", ""},
      {"LlamaTokenizer", "phi3", ""},
      {"LlamaTokenizer", "qwen2", "?"},
      {"LlamaTokenizer", "idefics2", "LlamaTokenizer"},
      {"LlamaTokenizerFast", "gemma2", "LlamaTokenizer"},
      {"PreTrainedTokenizerFast", "gemma", ""},
      {"GemmaTokenizer", "mistral", ""},
      {"", "gemma2", "GemmaTokenizer"},
      {"", "", ""},
      {"", "qwen2", "?"},
      {"CodeLlamaTokenizer", "", "CodeLlamaTokenizer"},
      {"TokenizersBackend", "llama", ""},
      {"", "qwen3", "?"},
      {"", "phi", "?"},
      {"LlamaTokenizer", "t5", "LlamaTokenizer"},
  };
  for (const auto& c : cases) {
    TokenizerConfig config;
    config.tokenizer_class = c.hub;
    config.model_type = c.model_type;
    EXPECT_EQ(transformers_class(config), c.read_as) << c.hub << " / " << c.model_type;
  }
}

class TokenizerFiles : public testing::TempDirTest {
 protected:
  // A fixture's tokenizer.json (the Llama 3 one's by default) with `edit`
  // applied, in the temp dir.
  std::string edited(const std::function<void(json&)>& edit, const std::string& fixture = "llama3_bpe") {
    json j = json::parse(*read_whole_file(testing::tokenizer_fixture(fixture) + "/tokenizer.json"));
    edit(j);
    return write("tokenizer.json", j.dump());
  }
  static std::string error_of(const std::string& path) {
    auto tok = Tokenizer::load(path);
    EXPECT_FALSE(tok.ok());
    return tok.ok() ? "" : std::string(tok.status().message());
  }
};

// A pair merged twice in the list takes its last rank, as in tokenizers'
// map of merges: the same ids as with the pair moved to the end, for the
// first pair whose move to the end changes the text's ids.
TEST_F(TokenizerFiles, APairListedTwiceTakesItsLastRank) {
  const std::string corpus = testing::tokenizer_corpus();
  const std::string text = corpus.substr(0, corpus.rfind('\n', 2000) + 1);  // whole lines
  auto original = testing::load_tokenizer_fixture("llama3_bpe");
  const std::vector<uint32_t> plain = testing::encoded(*original, text, false);
  for (int k = 0; k < 400; ++k) {
    edited([&](json& j) {
      const json pair = j["model"]["merges"][k];
      j["model"]["merges"].erase(k);
      j["model"]["merges"].push_back(pair);
    });
    const std::vector<uint32_t> moved = testing::encoded(**Tokenizer::load(path("tokenizer.json")), text, false);
    if (moved == plain) continue;
    edited([&](json& j) { j["model"]["merges"].push_back(j["model"]["merges"][k]); });
    EXPECT_EQ(testing::encoded(**Tokenizer::load(path("tokenizer.json")), text, false), moved) << "merge " << k;
    return;
  }
  FAIL() << "no merge among the first 400 matters to the text";
}

TEST_F(TokenizerFiles, RefusesWhatItCannotReadNamingTheFileAndThePlace) {
  EXPECT_EQ(error_of(path("none")), path("none") + ": no such file or directory");
  EXPECT_EQ(error_of(dir_.string()), dir_.string() + ": holds neither tokenizer.json nor tokenizer.model");
  EXPECT_EQ(error_of(write("vocab.txt", "a\nb\n")),
            path("vocab.txt") + ": not a kind of tokenizer zerod reads (tokenizer.json or a SentencePiece .model)");
  EXPECT_EQ(error_of(write("tokenizer.model", "not a protobuf"))
                .find(path("tokenizer.model") + ": not a SentencePiece model"),
            0u);
  std::filesystem::remove(path("tokenizer.model"));

  const std::string file = path("tokenizer.json");
  EXPECT_EQ(error_of(edited([](json& j) { j["model"]["type"] = "WordPiece"; })),
            file +
                ": model.type 'WordPiece' is not supported (BPE is; a SentencePiece model is read from "
                "tokenizer.model)");
  EXPECT_EQ(error_of(edited([](json& j) { j["model"]["byte_fallback"] = true; })),
            file + ": model.vocab lacks the byte 0's token <0x00>");
  EXPECT_EQ(error_of(edited([](json& j) {
              j["normalizer"] = {{"type", "Lowercase"}};
            })),
            file + ": normalizer type 'Lowercase' is not supported (NFC is)");
  EXPECT_EQ(error_of(edited([](json& j) {
              j["pre_tokenizer"] = {{"type", "Whitespace"}};
            })),
            file + ": pre_tokenizer: byte-level BPE ends in a ByteLevel pre-tokenizer; this file's does not");
  EXPECT_EQ(error_of(edited([](json& j) {
              j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a";
            })).find(file + ": pre_tokenizer: the split pattern '(a' does not compile"),
            0u);
  EXPECT_EQ(error_of(edited([](json& j) { j["added_tokens"][0]["lstrip"] = true; })),
            file + ": added_tokens: '<|begin_of_text|>' sets lstrip, which is not supported");
  EXPECT_EQ(error_of(edited([](json& j) { j["model"]["merges"][3] = "ab"; })),
            file + ": model.merges[3] is neither 'a b' nor [a, b]");
  EXPECT_EQ(error_of(edited([](json& j) {
              j["model"]["merges"][3] = {"Ġ", "no such token"};
            })),
            file + ": model.merges[3] names a token the vocabulary lacks");
  EXPECT_EQ(error_of(edited([](json& j) { j["added_tokens"][0]["id"] = uint64_t{1} << 31; })),
            file + ": added_tokens: an entry without content or an id below 2^31");
  EXPECT_EQ(error_of(edited([](json& j) { j["model"]["vocab"]["a"] = -1; })),
            file + ": model.vocab['a'] is not an id below 2^31");
  EXPECT_EQ(error_of(edited([](json& j) {
              j["post_processor"] = {{"type", "BertProcessing"}};
            })),
            file + ": post_processor type 'BertProcessing' is not supported (TemplateProcessing is)");
  EXPECT_EQ(error_of(write("tokenizer.json", "{\"model\": ")).find(file), 0u);

  edited([](json&) {});
  write("tokenizer_config.json", R"({"bos_token": 7})");
  EXPECT_EQ(error_of(file), path("tokenizer_config.json") + ": bos_token is neither text nor a token object");
  write("tokenizer_config.json", R"({"legacy": "yes"})");
  EXPECT_EQ(error_of(file), path("tokenizer_config.json") + ": legacy is not true or false");
  write("tokenizer_config.json", R"({"tokenizer_class": 3})");
  EXPECT_EQ(error_of(file), path("tokenizer_config.json") + ": tokenizer_class is not text");
}

// The Mistral-hub-shaped fixture's tokenizer.json under other configs, each
// with the ids transformers gave: a special token the config names matched
// whole (and the file's Prepend after it), a rebuilding class taking the
// config's added tokens, model_type "llama" leaving the hub's class,
// add_prefix_space false, the class from config.json.
TEST_F(TokenizerFiles, ConfigsDecideTheStepsAndAddedTokensAsInTransformers) {
  const std::string fixture = testing::tokenizer_fixture("spm_file_pipeline");
  const json variants = expected_of("spm_file_pipeline")["variants"];
  ASSERT_EQ(variants.size(), 5u);
  for (const json& v : variants) {
    SCOPED_TRACE(v.dump());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::filesystem::copy_file(fixture + "/tokenizer.json", path("tokenizer.json"));
    write("tokenizer_config.json", v["tokenizer_config"].dump());
    if (v.contains("config")) write("config.json", v["config"].dump());
    auto tok = Tokenizer::load(dir_.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(testing::encoded(**tok, v["text"].get<std::string>(), false), v["ids"].get<std::vector<uint32_t>>());
  }
}

// Text that is not UTF-8 (which encode is not given: files and records are
// checked first) reads each stray byte as U+FFFD, as the byte-level path's
// ICU does.
TEST(Tokenizer, AStrayByteIsTheReplacementCharacter) {
  for (const char* name : {"mistral_spm", "gemma_spm", "qwen2_bpe"}) {
    auto tok = testing::load_tokenizer_fixture(name);
    EXPECT_EQ(testing::encoded(*tok, "a\xff b", false), testing::encoded(*tok, "a\uFFFD b", false)) << name;
  }
}

// A model directory holding both reads its tokenizer.json, as transformers
// does; the SentencePiece model only where there is no tokenizer.json.
TEST_F(TokenizerFiles, ADirectoryWithBothReadsTokenizerJson) {
  std::filesystem::copy_file(testing::tokenizer_fixture("llama2_sp") + "/tokenizer.model", path("tokenizer.model"));
  auto sp = Tokenizer::load(dir_.string());
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_EQ((*sp)->source(), path("tokenizer.model"));
  std::filesystem::copy_file(testing::tokenizer_fixture("mistral_spm") + "/tokenizer.json", path("tokenizer.json"));
  auto json_tok = Tokenizer::load(dir_.string());
  ASSERT_TRUE(json_tok.ok()) << json_tok.status();
  EXPECT_EQ((*json_tok)->source(), path("tokenizer.json"));
  EXPECT_TRUE((*json_tok)->encode_pieces("hi").ok());
}

// A SentencePiece-style file (byte fallback) read as the file says (its
// class is none that rebuilds it): what its steps cannot be is refused.
TEST_F(TokenizerFiles, RefusesByteFallbackStepsItCannotTake) {
  const std::string file = path("tokenizer.json");
  auto spm = [&](const std::function<void(json&)>& edit) {
    write("tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast"})");
    return error_of(edited(edit, "spm_file_pipeline"));
  };
  EXPECT_EQ(spm([](json& j) {
              j["normalizer"] = {{"type", "NFC"}};
            }),
            file + ": normalizer type 'NFC' is not supported with byte fallback (Prepend and Replace are)");
  EXPECT_EQ(spm([](json& j) {
              j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "  "}}}, {"content", "x"}};
            }),
            file + ": normalizer: a Replace of other than one character is not supported");
  EXPECT_EQ(spm([](json& j) {
              j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " "}}}, {"content", "x"}};
            }),
            file + ": normalizer: a Replace of other than one character is not supported");
  EXPECT_EQ(spm([](json& j) {
              j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ""}};
            }),
            file + ": normalizer: a Replace by nothing is not supported");
  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Whitespace"}};
            }),
            file + ": pre_tokenizer type 'Whitespace' is not supported with byte fallback (Metaspace and Split are)");
  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}, {"prepend_scheme", "first"}};
            }),
            file + ": pre_tokenizer: Metaspace's replacement is not one character");
  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
            }),
            file + ": pre_tokenizer: Metaspace's prepend_scheme 'sometimes'");
  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", ","}}}, {"behavior", "Isolated"}};
            }),
            file +
                ": pre_tokenizer: with byte fallback, a Split other than on ' ', MergedWithPrevious, is not "
                "supported");
  EXPECT_EQ(spm([](json& j) { j["added_tokens"][3]["normalized"] = true; }),
            file +
                ": added_tokens: '[INST]' is matched in the normalized text (normalized: true), which is not "
                "supported with byte fallback");
  // A class that replaces the file's steps (LlamaTokenizer) still refuses a
  // malformed one, as transformers' parse of the file does, and takes one
  // it would not compute, which the class does not use.
  write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer"})");
  json j = json::parse(*read_whole_file(testing::tokenizer_fixture("mistral_spm") + "/tokenizer.json"));
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  write("tokenizer.json", j.dump());
  EXPECT_EQ(error_of(file), file + ": pre_tokenizer: Metaspace's prepend_scheme 'sometimes'");
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  j["normalizer"] = {{"type", "Lowercase"}};
  write("tokenizer.json", j.dump());
  auto rebuilt = Tokenizer::load(file);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(testing::encoded(**rebuilt, "Hello ABC world", false),
            testing::encoded(*testing::load_tokenizer_fixture("mistral_spm"), "Hello ABC world", false));

  // A class zerod does not follow, named or reached by the model's type.
  write("tokenizer_config.json", R"({"tokenizer_class": "CodeLlamaTokenizer"})");
  EXPECT_EQ(error_of(file), file +
                                ": transformers reads it through CodeLlamaTokenizer, which rebuilds it in a way zerod "
                                "does not follow (it follows LlamaTokenizer, GemmaTokenizer and the file's own steps)");
  write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer"})");
  write("config.json", R"({"model_type": "qwen2"})");
  EXPECT_EQ(error_of(file), file +
                                ": transformers reads it through the class model_type 'qwen2' is registered to, which "
                                "rebuilds it in a way zerod does not follow (it follows LlamaTokenizer, "
                                "GemmaTokenizer and the file's own steps)");
  write("config.json", R"({"model_type": 2})");
  EXPECT_EQ(error_of(file), path("config.json") + ": model_type is not text");
  write("config.json", R"(["mistral"])");
  EXPECT_EQ(error_of(file), path("config.json") + ": not a JSON object");
  std::filesystem::remove(path("config.json"));

  // The special tokens the config names, and its added tokens.
  write("tokenizer.json", *read_whole_file(testing::tokenizer_fixture("mistral_spm") + "/tokenizer.json"));
  write("tokenizer_config.json", R"({"unk_token": "<nowhere>"})");
  EXPECT_EQ(error_of(file), file +
                                ": tokenizer_config.json names the special token '<nowhere>', which the "
                                "vocabulary lacks");
  write("tokenizer_config.json", R"({"additional_special_tokens": "[INST]"})");
  EXPECT_EQ(error_of(file), path("tokenizer_config.json") + ": additional_special_tokens is neither a list nor a map");
  write("tokenizer_config.json", R"({"additional_special_tokens": [7]})");
  EXPECT_EQ(error_of(file),
            path("tokenizer_config.json") + ": additional_special_tokens[0] is neither text nor a token object");
  write("tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "added_tokens_decoder": {"x": {}}})");
  EXPECT_EQ(error_of(file), path("tokenizer_config.json") + ": added_tokens_decoder['x'] is not an id's token object");
  write("tokenizer_config.json",
        R"({"tokenizer_class": "LlamaTokenizer", "added_tokens_decoder": {"1": {"content": "<s>", "lstrip": true}}})");
  EXPECT_EQ(error_of(file),
            file + ": tokenizer_config.json's added_tokens_decoder: '<s>' sets lstrip, which is not supported");

  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "first"}};
            }),
            file + ": pre_tokenizer: Metaspace has no replacement");
  EXPECT_EQ(spm([](json& j) {
              j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", false}};
            }),
            file + ": pre_tokenizer: Metaspace's add_prefix_space is false with no prepend_scheme");
  EXPECT_EQ(spm([](json& j) { j["model"]["ignore_merges"] = true; }),
            file + ": model.ignore_merges with byte fallback is not supported");
  EXPECT_EQ(spm([](json& j) { j["model"]["vocab"].erase("<0x7F>"); }),
            file + ": model.vocab lacks the byte 127's token <0x7F>");
}

}  // namespace
}  // namespace zerod
