// LoRA jobs through the trainer: model.lora read (and refused), the frozen
// base held at every stage and in NF4, checkpoints of the adapters alone,
// PEFT's files written and read back, and the merged model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/trainer.h"
#include "runtime/engine/worker.h"
#include "runtime/model/hf_gpt2.h"
#include "runtime/model/nf4_weights.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using testing::joined;

// Adapters of rank 4 on two of GPT-2's products.
const std::string kLora = R"(model.lora={"r": 4, "alpha": 8, "target_modules": ["c_attn", "mlp.c_proj"]})";
const std::string kNf4 = R"(model.lora.base_quant="nf4")";

JobConfig lora_job(const std::vector<std::string>& overrides = {}) {
  return testing::config_with(testing::tiny_job(), joined({kLora}, overrides));
}

// The values a source hands the model, in the flat order of `layout` (the
// model's): read back from the device after the views are made.
std::vector<float> source_values(WeightSource& w, const GptLayout& layout, Device& device) {
  std::vector<float> out(layout.num_params());
  Stream& s = device.compute_stream();
  const auto take = [&](int id, int layer, const void* p) {
    device.copy(s, out.data() + layout.offset(id, layer), p, layout.tensor(id).numel * 4);
  };
  const GlobalWeights g = *w.globals();
  take(kWte, 0, g.wte);
  take(kWpe, 0, g.wpe);
  take(kLnfW, 0, g.lnfw);
  take(kLnfB, 0, g.lnfb);
  for (int l = 0; l < layout.config().n_layer; ++l) {
    const LayerWeights lw = *w.layer(l);
    // LayerWeights lists a layer's tensors in ParamId order, kLn1W to kFcProjB.
    const void* const tensors[] = {lw.ln1w, lw.ln1b, lw.qkvw, lw.qkvb, lw.attprojw, lw.attprojb,
                                   lw.ln2w, lw.ln2b, lw.fcw,  lw.fcb,  lw.fcprojw,  lw.fcprojb};
    for (int id = kLn1W; id <= kFcProjB; ++id) take(id, l, tensors[id - kLn1W]);
    EXPECT_TRUE(device.synchronize(s).ok());  // before the next layer() reuses its staging
  }
  EXPECT_TRUE(w.end_pass().ok());
  return out;
}

// What the base holds for a job of seed `seed`: GPT-2's initial values, the
// four product weights through NF4 as their linear layers when `nf4`
// (nf4_round_trip_product, held to hand-made transposes in test_nf4).
std::vector<float> expected_base(const GptLayout& layout, uint64_t seed, bool nf4) {
  std::vector<float> w(layout.num_params());
  init_gpt_params(layout, seed, w.data());
  if (!nf4) return w;
  for (int l = 0; l < layout.config().n_layer; ++l) {
    for (int id : kLoraProductWeights) {
      nf4_round_trip_product(layout.config(), id, w.data() + layout.offset(id, l));
    }
  }
  return w;
}

TEST(LoraConfigTest, ReadsPeftsSettings) {
  const JobConfig cfg = testing::config_with(
      testing::tiny_job(),
      {R"(model.lora={"r": 16, "alpha": 32, "dropout": 0, "target_modules": "all-linear", "bias": "none",
           "use_rslora": true, "base_quant": "nf4", "init_from": "adapters/"})"});
  ASSERT_TRUE(cfg.lora);
  EXPECT_EQ(cfg.lora->adapters.r, 16);
  EXPECT_EQ(cfg.lora->adapters.alpha, 32);
  EXPECT_TRUE(cfg.lora->adapters.use_rslora);
  EXPECT_EQ(cfg.lora->adapters.scale(), 32 / 4.0f);
  EXPECT_EQ(cfg.lora->adapters.targets, (std::array<bool, kNumLoraTargets>{true, true, true, true}));
  EXPECT_TRUE(cfg.lora->nf4_base);
  EXPECT_EQ(cfg.lora->init_from, "adapters/");
  // PEFT's defaults: r 8, alpha 8, c_attn.
  const JobConfig plain = testing::config_with(testing::tiny_job(), {"model.lora={}"});
  ASSERT_TRUE(plain.lora);
  EXPECT_EQ(plain.lora->adapters.r, 8);
  EXPECT_EQ(plain.lora->adapters.scale(), 1.0f);
  EXPECT_EQ(plain.lora->adapters.targets, (std::array<bool, kNumLoraTargets>{true, false, false, false}));
  EXPECT_FALSE(plain.lora->nf4_base);
  EXPECT_FALSE(testing::config_with(testing::tiny_job(), {}).lora);
  // PEFT's own names for alpha and dropout read the same settings.
  const JobConfig peft = testing::config_with(
      testing::tiny_job(), {R"(model.lora={"r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "use_rslora": true})"});
  ASSERT_TRUE(peft.lora);
  EXPECT_EQ(peft.lora->adapters.alpha, 32);
  EXPECT_EQ(peft.lora->adapters.dropout, 0.05);
  EXPECT_EQ(peft.lora->adapters.scale(), 32 / 4.0f);
}

TEST(LoraConfigTest, RefusesBadSettingsNamingTheKey) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"r": 0})", "model.lora.r must be at least 1, got 0"},
      {R"({"r": -4})", "model.lora.r must be at least 1, got -4"},
      {R"({"r": "eight"})", "model.lora.r"},
      {R"({"alpha": 0})", "model.lora.alpha (lora_alpha) must be positive"},
      {R"({"lora_alpha": -1})", "model.lora.alpha (lora_alpha) must be positive, got -1"},
      {R"({"alpha": 8, "lora_alpha": 8})", "model.lora.alpha: give lora_alpha or alpha, not both"},
      {R"({"dropout": 1.0})", "model.lora.dropout (lora_dropout) must be in [0, 1)"},
      {R"({"lora_dropout": 1.5})", "model.lora.dropout (lora_dropout) must be in [0, 1), got 1.5"},
      {R"({"dropout": 0, "lora_dropout": 0.1})", "model.lora.dropout: give lora_dropout or dropout, not both"},
      {R"({"target_modules": ["c_attn", "q_proj"]})", "model.lora.target_modules: 'q_proj' is not one of GPT-2's"},
      {R"({"target_modules": []})", "model.lora.target_modules names no module"},
      {R"({"target_modules": 3})", "model.lora.target_modules: expected a list of module names"},
      {R"({"bias": "all"})", "model.lora.bias: only 'none' is supported, got 'all'"},
      {R"({"base_quant": "int8"})", "model.lora.base_quant: 'int8' is not one of: none, nf4"},
      {R"({"rank": 8})", "model.lora.rank"},
      {R"({"r": 65, "target_modules": ["c_attn", "c_fc"]})", "model.lora.r is 65, larger than c_attn [64 -> 192] allows (64)"},
  };
  for (const auto& [lora, words] : cases) {
    SCOPED_TRACE(lora);
    nlohmann::json j = testing::tiny_job();
    j["model"]["lora"] = nlohmann::json::parse(lora);
    const absl::StatusOr<JobConfig> cfg = parse_job_config(j, 1);
    ASSERT_FALSE(cfg.ok());
    EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cfg.status().message().find(words), std::string::npos) << cfg.status();
  }
}

class LoraTrainingTest : public testing::TempDirTest {
 protected:
  // Trains `steps` steps; the losses.
  static std::vector<double> train(Trainer& t, int steps) {
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i) {
      auto s = t.step();
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) break;
      losses.push_back(s->loss);
    }
    return losses;
  }
  testing::WorkerResult export_to(const std::string& ckpt, const std::string& out, std::vector<std::string> flags) {
    return testing::run_worker_with(joined({"export", "--checkpoint", ckpt, "--out", out}, flags));
  }
};

// PEFT's start is the base model: the first loss equals the full model's
// bit for bit; training moves the adapters and never the base, which stays
// the seed's values (through NF4 with base_quant), at every stage.
TEST_F(LoraTrainingTest, StartsAtTheBaseModelAndNeverChangesIt) {
  for (const bool nf4 : {false, true}) {
    for (int stage : {0, 3}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << (nf4 ? ", nf4" : ""));
      const std::vector<std::string> o = {"zero_optimization.stage=" + std::to_string(stage),
                                          "zero_optimization.stage3_param_persistence_threshold=0"};
      const JobConfig cfg = lora_job(nf4 ? joined(o, {kNf4}) : o);
      auto t = testing::make_trainer(cfg);
      ASSERT_TRUE(t.ok()) << t.status();
      const GptLayout& model = (*t)->model_layout();
      const std::vector<float> want = expected_base(model, cfg.run.seed, nf4);
      EXPECT_TRUE(
          testing::same_bits(source_values((*t)->base_weights()->weights(), model, testing::test_device()), want));
      const std::vector<float> a0 = *(*t)->master_params();
      const std::vector<double> losses = train(**t, 4);
      ASSERT_EQ(losses.size(), 4u);
      if (!nf4) {
        auto full = testing::make_trainer(testing::config_with(testing::tiny_job(), o));
        ASSERT_TRUE(full.ok()) << full.status();
        EXPECT_EQ(losses[0], (*(*full)->step()).loss);
      }
      EXPECT_TRUE(
          testing::same_bits(source_values((*t)->base_weights()->weights(), model, testing::test_device()), want));
      // A as PEFT draws it, B zero at the start; both moved after.
      const std::vector<float> a4 = *(*t)->master_params();
      const GptLayout& ad = (*t)->layout();
      for (const ParamSegment& s : ad.segments()) {
        const bool is_b = (s.id - kQkvLoraA) % 2 == 1;
        const double bound = 1 / std::sqrt(double(ad.tensor(s.id).shape[0]));
        double moved = 0;
        for (int64_t i = s.offset; i < s.offset + s.numel; ++i) {
          ASSERT_LE(std::fabs(a0[i]), is_b ? 0.0 : bound);
          moved += std::fabs(a4[i] - a0[i]);
        }
        EXPECT_GT(moved, 0) << ad.tensor(s.id).name << " of layer " << s.layer;
      }
      EXPECT_LT(losses[3], losses[0]);
    }
  }
}

// The trained parameters are the adapters: a checkpoint holds them and their
// states, not the base, and a resume continues bitwise, dropout masks
// included; offloading them (and the base with offload_param) changes
// nothing.
TEST_F(LoraTrainingTest, CheckpointsHoldTheAdaptersAndOffloadIsBitwise) {
  const std::vector<std::string> bf16 = {"bf16.enabled=true", "zero_optimization.stage=2"};
  const JobConfig cfg = lora_job(joined(bf16, {"model.lora.dropout=0.1"}));
  auto straight = testing::make_trainer(cfg);
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::vector<double> want = train(**straight, 6);
  const std::vector<float> want_params = *(*straight)->master_params();
  const testing::TrainedRun undropped =
      testing::train_to_end(lora_job(joined(bf16, {"run.steps=6"})), nullptr, testing::test_device());
  ASSERT_EQ(undropped.losses.size(), 6u);
  EXPECT_EQ(undropped.losses[0], want[0]) << "B is zero: no adapter output to drop yet";
  EXPECT_NE(undropped.losses[5], want[5]) << "dropout changes the adapters' training";
  {
    auto first = testing::make_trainer(cfg);
    ASSERT_TRUE(first.ok());
    train(**first, 3);
    ASSERT_TRUE((*first)->save_checkpoint(path("ckpt"), 1).ok());
  }
  const std::string saved = path("ckpt/step-00000003");
  const CheckpointManifest m = *read_manifest(saved);
  ASSERT_TRUE(m.lora);
  EXPECT_EQ(m.json["tensors"], manifest_tensors((*straight)->layout()));
  EXPECT_EQ(m.json["lora"]["base"], nlohmann::json({{"quant", "none"}, {"seed", cfg.run.seed}}));
  // fp32 masters and Adam's two states of each adapter parameter, and little else.
  const uint64_t adapter_bytes = 12 * uint64_t((*straight)->layout().num_params());
  EXPECT_GE(m.files[0].bytes, adapter_bytes);
  EXPECT_LT(m.files[0].bytes, adapter_bytes + 8192);
  auto resumed = testing::make_trainer(cfg);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->resume(saved).ok());
  const std::vector<double> rest = train(**resumed, 3);
  EXPECT_EQ(rest, std::vector<double>(want.begin() + 3, want.end()));
  EXPECT_TRUE(testing::same_bits(*(*resumed)->master_params(), want_params));

  const std::string dir = dir_.string();
  const std::vector<std::vector<std::string>> offloads = {
      joined(bf16, testing::optimizer_on("cpu", dir)),
      joined({"bf16.enabled=true", "zero_optimization.stage=3"},
             joined(testing::optimizer_on("nvme", dir), testing::params_on("nvme", dir)))};
  for (const auto& o : offloads) {
    SCOPED_TRACE(::testing::PrintToString(o));
    std::vector<std::string> mem = o;
    std::erase_if(mem, [](const std::string& s) { return s.find("offload") != std::string::npos; });
    const testing::TrainedRun a = testing::train_to_end(lora_job(mem), nullptr, testing::test_device());
    const testing::TrainedRun b = testing::train_to_end(lora_job(o), nullptr, testing::test_device());
    ASSERT_TRUE(a.status.ok()) << a.status;
    ASSERT_TRUE(b.status.ok()) << b.status;
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_TRUE(testing::same_bits(a.params, b.params));
  }
}

// A resume needs the same adapters: another rank, or a full checkpoint
// into a LoRA job (and back), is refused naming 'lora', changing nothing.
TEST_F(LoraTrainingTest, ResumeRefusesOtherAdapters) {
  {
    auto t = testing::make_trainer(lora_job());
    ASSERT_TRUE(t.ok());
    train(**t, 1);
    ASSERT_TRUE((*t)->save_checkpoint(path("lora"), 1).ok());
    auto full = testing::make_trainer(testing::config_with(testing::tiny_job(), {}));
    ASSERT_TRUE(full.ok());
    train(**full, 1);
    ASSERT_TRUE((*full)->save_checkpoint(path("full"), 1).ok());
  }
  const std::pair<JobConfig, std::string> cases[] = {
      {lora_job({"model.lora.r=8"}), path("lora/step-00000001")},
      {lora_job({kNf4}), path("lora/step-00000001")},
      {lora_job(), path("full/step-00000001")},
      {testing::config_with(testing::tiny_job(), {}), path("lora/step-00000001")},
  };
  for (const auto& [cfg, ckpt] : cases) {
    auto t = testing::make_trainer(cfg);
    ASSERT_TRUE(t.ok());
    const std::vector<float> before = *(*t)->master_params();
    const absl::Status s = (*t)->resume(ckpt);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("'lora'"), std::string::npos) << s;
    EXPECT_TRUE(testing::same_bits(*(*t)->master_params(), before));
    EXPECT_EQ((*t)->steps_done(), 0);
  }
}

// export --adapter writes PEFT's names, shapes ([r, in] and [out, r]) and
// values; model.lora.init_from reads them back bit for bit; export --merge
// writes a model whose logits are the adapted model's.
TEST_F(LoraTrainingTest, ExportsPeftFilesAndTheMergedModel) {
  for (const bool nf4 : {false, true}) {
    SCOPED_TRACE(nf4 ? "nf4 base" : "fp32 base");
    const JobConfig cfg = lora_job(nf4 ? std::vector<std::string>{kNf4} : std::vector<std::string>{});
    const std::string ckpt = path(nf4 ? "ckpt_nf4" : "ckpt"), adapter = ckpt + "_adapter", merged = ckpt + "_merged";
    std::vector<float> trained;
    {
      auto t = testing::make_trainer(cfg);
      ASSERT_TRUE(t.ok());
      train(**t, 4);
      trained = *(*t)->master_params();
      ASSERT_TRUE((*t)->save_checkpoint(ckpt, 1).ok());
    }
    testing::WorkerResult r = export_to(ckpt, adapter, {"--adapter"});
    ASSERT_EQ(r.code, 0) << r.err;
    r = export_to(ckpt, merged, {"--merge"});
    ASSERT_EQ(r.code, 0) << r.err;

    // The file against the trained masters, transposed by hand.
    const GptLayout model(cfg.model), ad = GptLayout::adapters(cfg.model, cfg.lora->adapters);
    const SafetensorsReader file = *SafetensorsReader::open(adapter + "/adapter_model.safetensors");
    EXPECT_EQ(file.tensors().size(), ad.segments().size());
    const int64_t C = cfg.model.n_embd, R = 4;
    for (int l = 0; l < cfg.model.n_layer; ++l) {
      for (const auto& [module, in, out, target] : {std::tuple{"attn.c_attn", C, 3 * C, int(kLoraCAttn)},
                                                    std::tuple{"mlp.c_proj", 4 * C, C, int(kLoraMlpCProj)}}) {
        const std::string stem = "base_model.model.transformer.h." + std::to_string(l) + "." + module;
        const SafeTensor* a = file.find(stem + ".lora_A.weight");
        const SafeTensor* b = file.find(stem + ".lora_B.weight");
        ASSERT_TRUE(a && b) << stem;
        EXPECT_EQ(a->shape, (std::vector<int64_t>{R, in}));
        EXPECT_EQ(b->shape, (std::vector<int64_t>{out, R}));
        std::vector<float> av(R * in), bv(out * R);
        ASSERT_TRUE(file.read_f32(*a, 0, R * in, av.data()).ok());
        ASSERT_TRUE(file.read_f32(*b, 0, out * R, bv.data()).ok());
        const float* ma = trained.data() + ad.offset(lora_a_id(target), l);
        const float* mb = trained.data() + ad.offset(lora_a_id(target) + 1, l);
        for (int64_t k = 0; k < R; ++k) {
          for (int64_t i = 0; i < in; ++i) ASSERT_EQ(av[k * in + i], ma[i * R + k]);
          for (int64_t o = 0; o < out; ++o) ASSERT_EQ(bv[o * R + k], mb[k * out + o]);
        }
      }
    }
    const nlohmann::json pc = nlohmann::json::parse(testing::read_file(adapter + "/adapter_config.json"));
    EXPECT_EQ(pc["peft_type"], "LORA");
    EXPECT_EQ(pc["r"], 4);
    EXPECT_EQ(pc["lora_alpha"], 8.0);
    EXPECT_EQ(pc["fan_in_fan_out"], true);
    EXPECT_EQ(pc["target_modules"], nlohmann::json({"c_attn", "mlp.c_proj"}));

    // Read back: a job started from the adapter holds the trained masters.
    auto again =
        testing::make_trainer(lora_job(joined(nf4 ? std::vector<std::string>{kNf4} : std::vector<std::string>{},
                                              {"model.lora.init_from=\"" + adapter + "\""})));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(testing::same_bits(*(*again)->master_params(), trained));

    // The merged model against the adapted one, on the same tokens.
    testing::CpuRig rig;
    const int B = 2, T = 16;
    std::vector<int32_t> tokens(B * T);
    for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + 5) % cfg.model.vocab_size;
    std::vector<float> base = expected_base(model, cfg.run.seed, nf4);
    auto adapted_model =
        *Gpt::create(cfg.model, B, T, DType::kF32, false, rig.device, *rig.kernels, false, &cfg.lora->adapters);
    auto base_w = *FlatWeights::create(&model, DType::kF32, base.data(), rig.device, *rig.kernels);
    auto ad_w = *FlatWeights::create(&ad, DType::kF32, trained.data(), rig.device, *rig.kernels);
    AdaptedWeights adapted(base_w, ad_w);
    std::vector<float> want(size_t(B) * T * cfg.model.vocab_size), got(want.size());
    ASSERT_TRUE(adapted_model->forward_logits(adapted, tokens.data(), B, T, want.data(), false).ok());
    const Gpt2Weights merged_file = *Gpt2Weights::open(merged + "/model.safetensors", model);
    std::vector<float> merged_w(model.num_params());
    ASSERT_TRUE(merged_file.read(0, model.num_params(), merged_w.data()).ok());
    auto plain = *Gpt::create(cfg.model, B, T, DType::kF32, false, rig.device, *rig.kernels);
    auto plain_w = *FlatWeights::create(&model, DType::kF32, merged_w.data(), rig.device, *rig.kernels);
    ASSERT_TRUE(plain->forward_logits(plain_w, tokens.data(), B, T, got.data(), false).ok());
    // The products summed in another order: rounding-sized differences.
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
      scale = std::max(scale, std::fabs(double(want[i])));
    }
    EXPECT_LE(worst, 1e-5 * scale) << "largest logit " << scale;
    // And the adapters matter: the base alone is farther off.
    std::vector<float> plain_logits(want.size());
    auto base_only = *FlatWeights::create(&model, DType::kF32, base.data(), rig.device, *rig.kernels);
    ASSERT_TRUE(plain->forward_logits(base_only, tokens.data(), B, T, plain_logits.data(), false).ok());
    double base_diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      base_diff = std::max(base_diff, std::fabs(double(plain_logits[i]) - want[i]));
    EXPECT_GT(base_diff, 100 * worst);
  }
}

// Adapter files and export requests that do not fit the job: exit 2
// naming the key or tensor.
TEST_F(LoraTrainingTest, RefusesAdaptersThatDoNotFit) {
  {
    auto t = testing::make_trainer(lora_job());
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->save_checkpoint(path("lora"), 1).ok());
    auto full = testing::make_trainer(testing::config_with(testing::tiny_job(), {}));
    ASSERT_TRUE(full.ok());
    ASSERT_TRUE((*full)->save_checkpoint(path("full"), 1).ok());
  }
  ASSERT_EQ(export_to(path("lora"), path("adapter"), {"--adapter"}).code, 0);
  const std::string from = "model.lora.init_from=\"" + path("adapter") + "\"";
  const std::pair<std::vector<std::string>, std::string> jobs[] = {
      {{"model.lora.r=8", from}, "'r' is 4 but the job's model.lora has 8"},
      {{"model.lora.alpha=16", from}, "'lora_alpha' is 8.0 but the job's model.lora has 16"},
      {{"model.n_embd=128", "model.n_head=2", from},
       "tensor 'base_model.model.transformer.h.0.attn.c_attn.lora_A.weight' has shape [4,64], the job's adapter needs "
       "[4,128]"},
      {{R"(model.lora.target_modules=["c_attn", "mlp.c_proj", "c_fc"])", from},
       "has no tensor 'base_model.model.transformer.h.0.mlp.c_fc.lora_A.weight'"},
      {{R"(model.lora.target_modules=["c_attn"])", from},
       "has a tensor 'base_model.model.transformer.h.0.mlp.c_proj.lora_A.weight' that the job's model.lora"},
      {{"model.lora.init_from=\"" + path("nowhere") + "\""}, "model.lora.init_from: " + path("nowhere") + " is not"},
  };
  for (const auto& [overrides, words] : jobs) {
    SCOPED_TRACE(::testing::PrintToString(overrides));
    nlohmann::json j = testing::tiny_job();
    j["run"]["steps"] = 1;
    for (const std::string& o : joined({kLora}, overrides)) ASSERT_TRUE(apply_override(j, o).ok());
    const std::string job = write("job.json", j.dump());
    const testing::WorkerResult r = testing::run_worker_with({"--config", job});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  }
  const std::pair<std::vector<std::string>, std::string> exports[] = {
      {{"--checkpoint", path("full"), "--adapter"}, "not a LoRA run's checkpoint: --adapter needs one"},
      {{"--checkpoint", path("full"), "--merge"}, "not a LoRA run's checkpoint: --merge needs one"},
      {{"--checkpoint", path("lora")}, "a LoRA run's checkpoint holds its adapters only"},
      {{"--checkpoint", path("lora"), "--adapter", "--base", path("x")}, "--base is the base model of --merge"},
      {{"--checkpoint", path("lora"), "--merge", "--base", path("nowhere.safetensors")}, "nowhere.safetensors"},
  };
  for (const auto& [args, words] : exports) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const testing::WorkerResult r = testing::run_worker_with(joined(joined({"export"}, args), {"--out", path("out")}));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("out/model.safetensors")));
  }
}

}  // namespace
}  // namespace zerod
