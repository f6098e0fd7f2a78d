// Hugging Face Llama-family files against transformers itself: the tiny
// random Llama (llama3 rope scaling, an untied head), Mistral and Qwen2
// (q/k/v biases, a tied head, sharded) of tests/fixtures/hf_llama, made by
// scripts/hf_llama_fixtures.py with transformers, with the logits, loss
// and gradients transformers computed. zerod imports each and computes
// the same; its export, read back, is the files' tensors bit for bit; bad
// files and configs are refused naming the file and the tensor or key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/config/job_config.h"
#include "runtime/engine/trainer.h"
#include "runtime/engine/worker.h"
#include "runtime/model/gpt.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/hf_llama.h"
#include "runtime/model/param_init.h"
#include "tests/float_compare.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(ZEROD_SOURCE_DIR) + "/tests/fixtures/hf_llama/" + name;
}

nlohmann::json expected(const std::string& name) {
  std::ifstream in(fixture(name) + "/expected.json");
  return nlohmann::json::parse(in);
}

// Every tensor of a model directory (one file or shards) by name, as fp32.
std::map<std::string, std::vector<float>> hf_tensors(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    auto r = SafetensorsReader::open(e.path().string());
    EXPECT_TRUE(r.ok()) << r.status();
    for (const SafeTensor& t : r->tensors()) {
      std::vector<float>& v = out[t.name];
      v.resize(t.numel());
      EXPECT_TRUE(r->read_f32(t, 0, t.numel(), v.data()).ok());
    }
  }
  return out;
}

class HfLlamaTest : public testing::TempDirTest, public ::testing::WithParamInterface<const char*> {
 protected:
  // The fixture's model, imported: its shape from config.json, its
  // parameters from the weights.
  void import(const std::string& name) {
    auto c = read_hf_config(fixture(name));
    ASSERT_TRUE(c.ok()) << c.status();
    cfg_ = *c;
    cfg_.block_size = 8;
    layout_ = std::make_unique<GptLayout>(cfg_);
    auto init = initial_params(*layout_, 0, fixture(name));
    ASSERT_TRUE(init.ok()) << init.status();
    params_.resize(layout_->num_params());
    ASSERT_TRUE((*init)(0, layout_->num_params(), params_.data()).ok());
  }
  GptConfig cfg_;
  std::unique_ptr<GptLayout> layout_;
  std::vector<float> params_;
};

TEST_P(HfLlamaTest, ImportGivesTransformersLogitsLossAndGradients) {
  const std::string name = GetParam();
  ASSERT_NO_FATAL_FAILURE(import(name));
  const nlohmann::json e = expected(name);
  const int B = e["batch"], T = e["seq"], V = e["vocab"];
  const std::vector<int32_t> tokens = e["tokens"], targets = e["targets"];
  const std::vector<float> want = e["logits"];
  testing::CpuRig rig;
  auto model = *Gpt::create(cfg_, B, T, DType::kF32, false, rig.device, *rig.kernels);
  auto w = *FlatWeights::create(&model->layout(), DType::kF32, params_.data(), rig.device, *rig.kernels);
  std::vector<float> logits(size_t(B) * T * V);
  ASSERT_TRUE(model->forward_logits(w, tokens.data(), B, T, logits.data(), false).ok());
  // fp32 both, summed in other orders: within 1e-5 of the largest logit.
  float largest = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::fabs(want[i]));
    diff = std::max(diff, std::fabs(logits[i] - want[i]));
  }
  EXPECT_LT(diff, 1e-5f * largest) << "largest logit " << largest;

  std::vector<float> grads(params_.size(), 0.0f);
  FlatGrads sink(&model->layout(), grads.data());
  const double loss = *model->forward_backward(w, sink, tokens.data(), targets.data(), B, T, 1.0f);
  EXPECT_NEAR(loss, e["loss"].get<double>(), 1e-6 * loss);
  // The gradients in Hugging Face's tensors: zerod's own export of them.
  const std::string out = path("grads");
  ASSERT_TRUE(export_llama(out, model->layout(), DType::kF32, [&](int64_t b, int64_t end, float* o) {
                std::copy(grads.begin() + b, grads.begin() + end, o);
                return absl::OkStatus();
              }).ok());
  const auto by_name = hf_tensors(out);
  int checked = 0;
  for (const auto& [tensor, g] : e["grads"].items()) {
    SCOPED_TRACE(tensor);
    ASSERT_TRUE(by_name.count(tensor));
    const std::vector<float>& have = by_name.at(tensor);
    float scale = 0;
    for (float v : g["values"]) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < g["index"].size(); ++k) {
      // fp32 sums of other orders: 1e-4 of the tensor's largest listed value.
      EXPECT_NEAR(have[g["index"][k].get<int64_t>()], g["values"][k].get<float>(), 1e-4f * scale + 1e-7f);
      ++checked;
    }
  }
  EXPECT_GE(checked, 6 * 21);
}

// The fixture's two sequences packed into one window of 16, each a
// document (positions 0 .. 7 twice): each document's loss is the mean
// cross-entropy of transformers' logits for that sequence run alone, and
// with attention crossing into the second document (no positions) the
// second's is not.
TEST_P(HfLlamaTest, APackedWindowsDocumentsHaveTransformersLossesOfEachAlone) {
  const std::string name = GetParam();
  ASSERT_NO_FATAL_FAILURE(import(name));
  const nlohmann::json e = expected(name);
  const int B = e["batch"], T = e["seq"], V = e["vocab"];
  ASSERT_EQ(B, 2);
  const std::vector<int32_t> tokens = e["tokens"], targets = e["targets"];
  const std::vector<float> logits = e["logits"];
  std::vector<int32_t> positions(2 * T);
  for (int t = 0; t < 2 * T; ++t) positions[t] = t % T;
  cfg_.block_size = 2 * T;
  testing::CpuRig rig;
  auto model = *Gpt::create(cfg_, 1, 2 * T, DType::kF32, false, rig.device, *rig.kernels, false, nullptr, 1, true);
  auto w = *FlatWeights::create(&model->layout(), DType::kF32, params_.data(), rig.device, *rig.kernels);
  std::vector<float> grads(params_.size(), 0.0f);
  FlatGrads sink(&model->layout(), grads.data());
  for (int d = 0; d < 2; ++d) {
    SCOPED_TRACE(::testing::Message() << "document " << d);
    // Document d's targets alone: the pass's loss is their sum over 2T.
    std::vector<int32_t> mine(2 * T, -1);
    std::copy_n(targets.begin() + d * T, T, mine.begin() + d * T);
    const std::vector<double> want_logits(logits.begin() + int64_t(d) * T * V, logits.begin() + int64_t(d + 1) * T * V);
    const std::vector<int32_t> want_targets(targets.begin() + d * T, targets.begin() + (d + 1) * T);
    const double want = testing::mean_cross_entropy(want_logits, want_targets, V);
    const double packed =
        *model->forward_backward(w, sink, tokens.data(), mine.data(), 1, 2 * T, 1.0f, 0, positions.data()) * 2;
    EXPECT_NEAR(packed, want, 1e-5 * want);
    const double crossing = *model->forward_backward(w, sink, tokens.data(), mine.data(), 1, 2 * T, 1.0f) * 2;
    if (d == 1) EXPECT_GT(std::fabs(crossing - want), 1e-3 * want);
  }
}

TEST_P(HfLlamaTest, ExportIsTheFilesTensorsBitForBitAndItsConfigTheShape) {
  const std::string name = GetParam();
  ASSERT_NO_FATAL_FAILURE(import(name));
  const auto read = [&](int64_t b, int64_t end, float* o) {
    std::copy(params_.begin() + b, params_.begin() + end, o);
    return absl::OkStatus();
  };
  // One file, and shards of at most 8 KB with their index.
  for (const int64_t shard : {int64_t{5} << 30, int64_t{8} << 10}) {
    const std::string out = path(absl::StrCat("export-", shard));
    ASSERT_TRUE(export_llama(out, *layout_, DType::kF32, read, shard).ok());
    EXPECT_EQ(fs::exists(out + "/model.safetensors.index.json"), shard < 1 << 20);
    const auto mine = hf_tensors(out), theirs = hf_tensors(fixture(name));
    EXPECT_EQ(mine, theirs);
    auto back = read_hf_config(out);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(gpt_config_json(*back), gpt_config_json(cfg_));
    // And imported again, through the index where there is one.
    auto again = initial_params(*layout_, 0, out);
    ASSERT_TRUE(again.ok()) << again.status();
    std::vector<float> p(params_.size());
    ASSERT_TRUE((*again)(0, layout_->num_params(), p.data()).ok());
    EXPECT_EQ(p, params_);
  }
  // Exported again into one directory, one form then the other: only the
  // last one's files stay, so transformers reads no stale weights.
  const std::string again_dir = path("export-again");
  const auto names = [&] {
    std::set<std::string> n;
    for (const auto& e : fs::directory_iterator(again_dir)) n.insert(e.path().filename().string());
    return n;
  };
  ASSERT_TRUE(export_llama(again_dir, *layout_, DType::kF32, read, 8 << 10).ok());
  const std::set<std::string> sharded = names();
  EXPECT_GT(sharded.size(), 3u);
  ASSERT_TRUE(export_llama(again_dir, *layout_, DType::kF32, read).ok());
  EXPECT_EQ(names(), (std::set<std::string>{"config.json", "model.safetensors"}));
  ASSERT_TRUE(export_llama(again_dir, *layout_, DType::kF32, read, 8 << 10).ok());
  EXPECT_EQ(names(), sharded);
  // In bf16: each value rounded once.
  const std::string out = path("export-bf16");
  ASSERT_TRUE(export_llama(out, *layout_, DType::kBF16, read).ok());
  auto again = initial_params(*layout_, 0, out);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<float> p(params_.size()), rounded = params_;
  ASSERT_TRUE((*again)(0, layout_->num_params(), p.data()).ok());
  round_to(DType::kBF16, rounded.data(), rounded.size());
  EXPECT_EQ(p, rounded);
}

INSTANTIATE_TEST_SUITE_P(Models, HfLlamaTest, ::testing::Values("llama", "mistral", "qwen2"));

// The 70B class both ways: the presets' config.json files carry the
// published shapes and read back as the presets; and a Llama in more
// shards than the 70B's 5 GiB ones make (29 of its bf16 141 GB; here one
// tensor a shard, 39 of them) exports and imports bit for bit.
class HfLlamaLarge : public testing::TempDirTest {};

TEST_F(HfLlamaLarge, The70BClassConfigsAndThirtyShardsGoBothWays) {
  struct Published {
    const char* preset;
    int layers, heads, kv_heads, width, mlp, vocab, positions;
    double theta, eps;
    bool qkv_bias;
  };
  for (const Published& want : {Published{"llama-3.1-70b", 80, 64, 8, 8192, 28672, 128256, 131072, 5e5, 1e-5, false},
                                Published{"qwen2.5-72b", 80, 64, 8, 8192, 29568, 152064, 131072, 1e6, 1e-5, true}}) {
    SCOPED_TRACE(want.preset);
    const GptConfig c = *gpt_preset(want.preset);
    const nlohmann::json j = hf_llama_config_json(c, DType::kBF16);
    EXPECT_EQ(j["num_hidden_layers"], want.layers);
    EXPECT_EQ(j["num_attention_heads"], want.heads);
    EXPECT_EQ(j["num_key_value_heads"], want.kv_heads);
    EXPECT_EQ(j["hidden_size"], want.width);
    EXPECT_EQ(j["intermediate_size"], want.mlp);
    EXPECT_EQ(j["vocab_size"], want.vocab);
    EXPECT_EQ(j["max_position_embeddings"], want.positions);
    EXPECT_EQ(j["rope_theta"], want.theta);
    EXPECT_EQ(j["rms_norm_eps"], want.eps);
    EXPECT_EQ(j["tie_word_embeddings"], false);
    const std::string dir = path(want.preset);
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << j.dump(2);
    auto back = read_hf_config(dir);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(gpt_config_json(*back), gpt_config_json(c));
    EXPECT_EQ(back->qkv_bias, want.qkv_bias);
  }
  GptConfig c = *gpt_preset("llama-tiny");
  c.n_layer = 4;
  const GptLayout layout(c);
  std::vector<float> params(layout.num_params());
  for (size_t i = 0; i < params.size(); ++i) params[i] = std::sin(0.37f * static_cast<float>(i));
  const auto read = [&](int64_t b, int64_t end, float* o) {
    std::copy(params.begin() + b, params.begin() + end, o);
    return absl::OkStatus();
  };
  const std::string out = path("shards");
  ASSERT_TRUE(export_llama(out, layout, DType::kF32, read, /*shard_bytes=*/1).ok());
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(out + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [tensor, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_EQ(files.size(), 4u * 9 + 3);  // each layer's nine tensors, the embeddings, the final norm, the head
  EXPECT_EQ(files.count("model-00039-of-00039.safetensors"), 1u);
  auto again = initial_params(layout, 0, out);
  ASSERT_TRUE(again.ok()) << again.status();
  std::vector<float> p(params.size());
  ASSERT_TRUE((*again)(0, layout.num_params(), p.data()).ok());
  EXPECT_EQ(p, params);
}

// As a user runs it: a job whose model is only init_from (the shape from
// its config.json), trained with a learning rate of 0, saved and exported
// (zero-worker export): the fixture's tensors again. (scripts/hf_llama_check.py loads such an export
// in transformers: the same logits.)
class HfLlamaJob : public testing::TempDirTest {};

TEST_F(HfLlamaJob, AJobOfInitFromAloneTrainsSavesAndExportsTheSameModel) {
  for (const char* name : {"llama", "qwen2"}) {
    SCOPED_TRACE(name);
    nlohmann::json job = {{"model", {{"init_from", fixture(name)}, {"block_size", 32}}},
                          {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
                          {"run", {{"steps", 2}, {"seed", 3}, {"device", "cpu"}}},
                          {"train_batch_size", 4},
                          {"zero_optimization", {{"stage", 3}}},
                          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.0}, {"weight_decay", 0.0}}}}}};
    ASSERT_TRUE(fill_model_from_hf(job).ok());
    EXPECT_EQ(job["model"]["block_size"], 32);  // given, so kept
    const JobConfig cfg = testing::config_with(job, {});
    ASSERT_TRUE(cfg.model.llama());
    EXPECT_EQ(cfg.model.qkv_bias, std::string(name) == "qwen2");
    auto t = testing::make_trainer(cfg);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE((*t)->step().ok());
    auto saved = (*t)->save_checkpoint(path(std::string("ckpt-") + name), 1);
    ASSERT_TRUE(saved.ok()) << saved.status();
    std::ostringstream out, err;
    const std::string hf = path(std::string("hf-") + name);
    ASSERT_EQ(run_export({*saved, hf}, out, err), 0) << err.str();
    EXPECT_NE(out.str().find("model.safetensors"), std::string::npos) << out.str();
    EXPECT_EQ(hf_tensors(hf), hf_tensors(fixture(name)));
  }
}

// LoRA on a Llama from its Hugging Face files: adapters on parts of fused
// products (q_proj, v_proj of q, k and v; up_proj of gate and up) and a
// whole one (down_proj), trained, saved and exported as PEFT's files
// (nn.Linear's names and orientation: no fan_in_fan_out) and as the model
// with them merged in, whose logits are the adapted model's. (The GPU
// check's scripts/peft_check.py reads both with PEFT and transformers.)
TEST_F(HfLlamaJob, LoraAdaptersExportAsPeftFilesAndMerged) {
  nlohmann::json job = {
      {"model",
       {{"init_from", fixture("llama")},
        {"block_size", 32},
        {"lora", {{"r", 4}, {"alpha", 8}, {"target_modules", {"q_proj", "v_proj", "up_proj", "down_proj"}}}}}},
      {"data", {{"kind", "synthetic"}, {"seq_len", 32}}},
      {"run", {{"steps", 3}, {"seed", 3}, {"device", "cpu"}}},
      {"train_batch_size", 4},
      {"zero_optimization", {{"stage", 2}}},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-2}}}}}};
  ASSERT_TRUE(fill_model_from_hf(job).ok());
  const JobConfig cfg = testing::config_with(job, {});
  std::vector<float> trained;
  const std::string ckpt = path("ckpt");
  {
    auto t = testing::make_trainer(cfg);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->step().ok());
    trained = *(*t)->master_params();
    ASSERT_TRUE((*t)->save_checkpoint(ckpt, 1).ok());
  }
  std::ostringstream out, err;
  const std::string adapter = path("adapter"), merged = path("merged");
  ExportOptions to_adapter{ckpt, adapter};
  to_adapter.adapter = true;
  ASSERT_EQ(run_export(to_adapter, out, err), 0) << err.str();
  ExportOptions to_merged{ckpt, merged};
  to_merged.merge = true;
  ASSERT_EQ(run_export(to_merged, out, err), 0) << err.str();

  const nlohmann::json pc = nlohmann::json::parse(std::ifstream(adapter + "/adapter_config.json"));
  EXPECT_EQ(pc["fan_in_fan_out"], false);
  EXPECT_EQ(pc["target_modules"], nlohmann::json({"q_proj", "v_proj", "up_proj", "down_proj"}));
  const auto files = hf_tensors(adapter);
  EXPECT_EQ(files.size(), 2u * 4 * 2);
  for (const char* module : {"self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj"}) {
    EXPECT_TRUE(files.count(absl::StrCat("base_model.model.model.layers.1.", module, ".lora_A.weight"))) << module;
  }
  // Read back: a job started from the adapter holds the trained masters.
  nlohmann::json again_job = job;
  again_job["model"]["lora"]["init_from"] = adapter;
  auto again = testing::make_trainer(testing::config_with(again_job, {}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*(*again)->master_params(), trained);

  // The merged model against the base with the adapters, on the same tokens.
  const GptLayout model(cfg.model), ad = GptLayout::adapters(cfg.model, cfg.lora->adapters);
  std::vector<float> base(model.num_params()), merged_w(model.num_params());
  ASSERT_TRUE((*initial_params(model, 0, fixture("llama")))(0, model.num_params(), base.data()).ok());
  ASSERT_TRUE((*initial_params(model, 0, merged))(0, model.num_params(), merged_w.data()).ok());
  testing::CpuRig rig;
  const int B = 2, T = 16;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + 5) % cfg.model.vocab_size;
  auto adapted_model =
      *Gpt::create(cfg.model, B, T, DType::kF32, false, rig.device, *rig.kernels, false, &cfg.lora->adapters);
  auto base_w = *FlatWeights::create(&model, DType::kF32, base.data(), rig.device, *rig.kernels);
  auto ad_w = *FlatWeights::create(&ad, DType::kF32, trained.data(), rig.device, *rig.kernels);
  AdaptedWeights adapted(base_w, ad_w);
  std::vector<float> want(size_t(B) * T * cfg.model.vocab_size), got(want.size()), plain(want.size());
  ASSERT_TRUE(adapted_model->forward_logits(adapted, tokens.data(), B, T, want.data(), false).ok());
  auto plain_model = *Gpt::create(cfg.model, B, T, DType::kF32, false, rig.device, *rig.kernels);
  auto merged_src = *FlatWeights::create(&model, DType::kF32, merged_w.data(), rig.device, *rig.kernels);
  ASSERT_TRUE(plain_model->forward_logits(merged_src, tokens.data(), B, T, got.data(), false).ok());
  ASSERT_TRUE(plain_model->forward_logits(base_w, tokens.data(), B, T, plain.data(), false).ok());
  double worst = 0, scale = 0, moved = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
    moved = std::max(moved, std::fabs(double(plain[i]) - want[i]));
  }
  // The products summed in another order: rounding-sized differences; the
  // adapters themselves move the logits far more.
  EXPECT_LE(worst, 1e-5 * scale) << "largest logit " << scale;
  EXPECT_GT(moved, 100 * worst);
}

TEST(HfLlamaConfig, ReadsEachModelTypesShape) {
  const GptConfig l = *read_hf_config(fixture("llama"));
  EXPECT_TRUE(l.llama());
  EXPECT_EQ(l.n_layer, 2);
  EXPECT_EQ(l.kv_heads(), 2);
  EXPECT_EQ(l.ffn_hidden, 48);
  EXPECT_EQ(l.rope_scaling.factor, 8);
  EXPECT_EQ(l.rope_scaling.original_max_position, 16);
  EXPECT_FALSE(l.tie_embeddings);
  EXPECT_FALSE(l.qkv_bias);
  const GptConfig q = *read_hf_config(fixture("qwen2") + "/model.safetensors.index.json");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(q.rope_theta, 1e6);
  EXPECT_EQ(q.norm_eps, 1e-6);
  EXPECT_EQ(q.rope_scaling.factor, 0);
}

class HfLlamaBadInput : public testing::TempDirTest {
 protected:
  // A copy of a fixture whose config.json `edit` changes.
  std::string copy_of(const std::string& name, const std::function<void(nlohmann::json&)>& edit = {}) {
    const std::string dir = path(name + "-" + std::to_string(copies_++));
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(fixture(name)))
      fs::copy(e.path(), dir + "/" + e.path().filename().string());
    if (edit) {
      std::ifstream in(dir + "/config.json");
      nlohmann::json c = nlohmann::json::parse(in);
      edit(c);
      std::ofstream(dir + "/config.json") << c.dump();
    }
    return dir;
  }
  // init_from `dir` for the fixture's own shape fails naming `what`.
  void expect_refused(const std::string& dir, const std::string& what, const std::string& shape_of = "llama") {
    GptConfig c = *read_hf_config(fixture(shape_of));
    const GptLayout layout(c);
    auto init = initial_params(layout, 0, dir);
    ASSERT_FALSE(init.ok()) << dir;
    // Bad input either way (exit 2): a file missing, or one zerod refuses.
    EXPECT_TRUE(absl::IsInvalidArgument(init.status()) || absl::IsNotFound(init.status())) << init.status();
    EXPECT_NE(init.status().message().find(what), std::string::npos) << init.status();
  }
  int copies_ = 0;
};

TEST_F(HfLlamaBadInput, ConfigsZerodDoesNotComputeAreRefusedNamingTheKey) {
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {[](nlohmann::json& c) { c["model_type"] = "phi3"; }, "\"phi3\""},
      {[](nlohmann::json& c) { c["hidden_act"] = "gelu"; }, "hidden_act"},
      {[](nlohmann::json& c) { c["attention_bias"] = true; }, "attention_bias"},
      {[](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "yarn"; }, "\"yarn\""},
      {[](nlohmann::json& c) { c["head_dim"] = 16; }, "head_dim"},
      {[](nlohmann::json& c) { c.erase("num_hidden_layers"); }, "num_hidden_layers"},
      {[](nlohmann::json& c) { c["num_key_value_heads"] = 3; }, "n_kv_head"},
  };
  for (const auto& [edit, what] : cases) {
    SCOPED_TRACE(what);
    const std::string dir = copy_of("llama", edit);
    auto c = read_hf_config(dir);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find(what), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find(dir + "/config.json"), std::string::npos) << c.status();
  }
  // Another shape than the job's, naming the field.
  expect_refused(copy_of("llama", [](nlohmann::json& c) { c["intermediate_size"] = 40; }), "ffn_hidden");
  // Mistral's sliding window bounds the positions.
  const GptConfig m = *read_hf_config(copy_of("mistral", [](nlohmann::json& c) { c["sliding_window"] = 32; }));
  EXPECT_EQ(m.block_size, 32);
}

TEST_F(HfLlamaBadInput, BadWeightFilesAreRefusedNamingTheFileAndTensor) {
  // A sharded index naming a missing file.
  std::string dir = copy_of("qwen2");
  fs::remove(dir + "/model-00002-of-00004.safetensors");
  expect_refused(dir, "model-00002-of-00004.safetensors", "qwen2");
  // A tensor the index puts in another file than the one holding it.
  dir = copy_of("qwen2");
  {
    std::ifstream in(dir + "/model.safetensors.index.json");
    nlohmann::json index = nlohmann::json::parse(in);
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00004.safetensors";
    std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  }
  expect_refused(dir, "model.norm.weight", "qwen2");
  // No config.json.
  dir = copy_of("llama");
  fs::remove(dir + "/config.json");
  expect_refused(dir, "no Hugging Face config.json");
  // Another model's weights: a shard of qwen2's under llama's config.
  dir = copy_of("llama");
  fs::copy(fixture("qwen2") + "/model-00001-of-00004.safetensors", dir + "/model.safetensors",
           fs::copy_options::overwrite_existing);
  expect_refused(dir, "has no tensor");
}

}  // namespace
}  // namespace zerod
