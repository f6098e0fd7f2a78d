// Job config parsing: DeepSpeed defaults, presets, the batch-size rule, key
// paths in errors, byte sizes, --set overrides and loading from a file.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"
#include "runtime/config/job_config.h"
#include "runtime/config/json_reader.h"

namespace zerod {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json minimal() { return {{"model", {{"preset", "gpt2-tiny"}}}, {"train_batch_size", 8}}; }

// The status failed with `code` and its message contains every one of `parts`.
::testing::AssertionResult fails_with(const absl::Status& s, absl::StatusCode code,
                                      const std::vector<std::string>& parts) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  const std::string msg(s.message());
  if (s.code() != code) {
    return ::testing::AssertionFailure() << "code " << absl::StatusCodeToString(s.code()) << ", expected "
                                         << absl::StatusCodeToString(code) << ": " << msg;
  }
  for (const std::string& p : parts) {
    if (msg.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message '" << msg << "' does not contain '" << p << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

// parse_job_config(cfg, world) is InvalidArgument and names `part`.
::testing::AssertionResult rejected(const json& cfg, const std::string& part, int world = 1) {
  return fails_with(parse_job_config(cfg, world).status(), absl::StatusCode::kInvalidArgument, {part});
}

JobConfig parse_ok(const json& cfg, int world = 1) {
  auto r = parse_job_config(cfg, world);
  EXPECT_TRUE(r.ok()) << cfg.dump() << ": " << std::string(r.status().message());
  return r.ok() ? *r : JobConfig{};
}

// ---------------------------------------------------------------- defaults

TEST(ConfigDefaults, MinimalConfigGetsDeepSpeedDefaults) {
  auto r = parse_job_config(minimal(), 1);
  ASSERT_TRUE(r.ok()) << std::string(r.status().message());
  const JobConfig& c = *r;
  EXPECT_EQ(c.preset, "gpt2-tiny");
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.micro_batch, 8);
  EXPECT_EQ(c.grad_accum, 1);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.gradient_clipping, 0.0);

  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.beta1, 0.9);
  EXPECT_EQ(c.optimizer.beta2, 0.999);
  EXPECT_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kNone);

  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.aio_block_size, 1048576);
  EXPECT_EQ(c.aio_queue_depth, 8);

  EXPECT_EQ(c.precision, DType::kF32);
  EXPECT_EQ(c.fp16.loss_scale, 0.0);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);

  EXPECT_EQ(c.model.block_size, 64);
  EXPECT_EQ(c.data.kind, DataKind::kSynthetic);
  EXPECT_EQ(c.data.seq_len, 64);  // defaults to model.block_size
  EXPECT_EQ(c.run.steps, 200);
  EXPECT_EQ(c.run.log_format, LogFormat::kText);
  EXPECT_FALSE(c.run.host_memory_limit.has_value());
  EXPECT_FALSE(c.activation_checkpointing);
}

TEST(ConfigDefaults, SeqLenFollowsAnOverriddenBlockSize) {
  json j = minimal();
  j["model"]["block_size"] = 32;
  EXPECT_EQ(parse_ok(j).data.seq_len, 32);
}

TEST(ConfigDefaults, RootMustBeAnObjectAndModelIsRequired) {
  EXPECT_FALSE(parse_job_config(json::array(), 1).ok());
  EXPECT_TRUE(rejected({{"train_batch_size", 8}}, "model"));
}

// ---------------------------------------------------------------- presets

TEST(ConfigModel, Gpt2Preset) {
  json j = minimal();
  j["model"]["preset"] = "gpt2";
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.preset, "gpt2");
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.n_embd, 768);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.block_size, 1024);
  EXPECT_EQ(c.data.seq_len, 1024);
}

TEST(ConfigModel, ExplicitFieldsOverrideThePreset) {
  json j = minimal();
  j["model"] = {{"preset", "gpt2"}, {"n_layer", 3}, {"block_size", 128}};
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.block_size, 128);
  EXPECT_EQ(c.model.n_head, 12);  // untouched preset fields stay
  EXPECT_EQ(c.model.n_embd, 768);
  EXPECT_EQ(c.model.vocab_size, 50257);
}

TEST(ConfigModel, CustomSizes) {
  json j = minimal();
  j["model"] = {{"n_layer", 1}, {"n_head", 4}, {"n_embd", 32}, {"vocab_size", 100}, {"block_size", 16}};
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.preset, "custom");
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.vocab_size, 100);
  EXPECT_EQ(c.data.seq_len, 16);
}

TEST(ConfigModel, CustomWithoutSizesIsAnError) {
  json j = minimal();
  j["model"] = {{"preset", "custom"}};
  EXPECT_TRUE(rejected(j, "model"));
  j["model"] = json::object();
  EXPECT_TRUE(rejected(j, "model"));
}

TEST(ConfigModel, UnknownPresetIsNamed) {
  json j = minimal();
  j["model"]["preset"] = "gpt5-huge";
  EXPECT_TRUE(rejected(j, "gpt5-huge"));
}

TEST(ConfigModel, EmbeddingMustDivideByHeads) {
  json j = minimal();
  j["model"]["n_embd"] = 65;  // gpt2-tiny has 2 heads
  EXPECT_TRUE(rejected(j, "n_embd"));
  j["model"]["n_embd"] = 66;
  EXPECT_EQ(parse_ok(j).model.n_embd, 66);
}

TEST(ConfigModel, LlamaPresetAndItsFields) {
  json j = minimal();
  j["model"] = {{"preset", "llama-3.1-8b"}};
  JobConfig c = parse_ok(j);
  EXPECT_TRUE(c.model.llama());
  EXPECT_EQ(c.model.n_layer, 32);
  EXPECT_EQ(c.model.kv_heads(), 8);
  EXPECT_EQ(c.model.ffn_hidden, 14336);
  EXPECT_EQ(c.model.rope_theta, 500000);
  EXPECT_EQ(c.model.rope_scaling.factor, 8);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.block_size, 131072);
  EXPECT_EQ(c.data.seq_len, 2048);  // the positions up to 2048, not 131072
  // Every field overrides the preset's; a factor of 0 is no scaling.
  j["model"] = {{"preset", "llama-3.1-8b"}, {"n_kv_head", 4},    {"ffn_hidden", 1000},
                {"rope_theta", 1e4},        {"norm_eps", 1e-6},  {"tie_embeddings", true},
                {"qkv_bias", true},         {"rope_scaling", {{"factor", 0}}}};
  c = parse_ok(j);
  EXPECT_EQ(c.model.kv_heads(), 4);
  EXPECT_EQ(c.model.ffn_hidden, 1000);
  EXPECT_EQ(c.model.rope_theta, 1e4);
  EXPECT_EQ(c.model.norm_eps, 1e-6);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_EQ(c.model.rope_scaling.factor, 0);
  j["model"]["rope_scaling"] = {{"factor", 4}, {"original_max_position_embeddings", 2048}};  // the rest kept
  c = parse_ok(j);
  EXPECT_EQ(c.model.rope_scaling.factor, 4);
  EXPECT_EQ(c.model.rope_scaling.original_max_position, 2048);
  EXPECT_EQ(c.model.rope_scaling.high_freq_factor, 4);  // the preset's
  // A custom Llama.
  j["model"] = {{"arch", "llama"}, {"n_layer", 1}, {"n_head", 4}, {"n_kv_head", 1}, {"n_embd", 32},
                {"ffn_hidden", 48}, {"vocab_size", 100}, {"block_size", 16}};
  c = parse_ok(j);
  EXPECT_TRUE(c.model.llama());
  EXPECT_EQ(c.model.qkv_width(), (4 + 2) * 8);
}

TEST(ConfigModel, BadLlamaFieldsAreNamed) {
  json j = minimal();
  j["model"] = {{"preset", "llama-tiny"}, {"arch", "mamba"}};
  EXPECT_TRUE(rejected(j, "mamba"));
  j["model"] = {{"preset", "llama-tiny"}, {"n_kv_head", 3}};
  EXPECT_TRUE(rejected(j, "n_kv_head"));
  j["model"] = {{"preset", "llama-tiny"}, {"rope_scaling", {{"factor", 8}, {"low_freq", 1}}}};
  EXPECT_TRUE(rejected(j, "low_freq"));
  j["model"] = {{"preset", "llama-tiny"}, {"rope_theta", -1}};
  EXPECT_TRUE(rejected(j, "rope_theta"));
  // GPT-2 has none of them.
  j["model"] = {{"preset", "gpt2-tiny"}, {"n_kv_head", 1}};
  EXPECT_TRUE(rejected(j, "model.arch"));
  j["model"] = {{"preset", "gpt2-tiny"}, {"tie_embeddings", false}};
  EXPECT_TRUE(rejected(j, "model.arch"));
  // A Llama's adapters go by its products' names.
  j["model"] = {{"preset", "llama-tiny"}, {"lora", {{"r", 4}, {"target_modules", {"c_attn"}}}}};
  EXPECT_TRUE(rejected(j, "'c_attn' is not one of a Llama's products: q_proj, k_proj"));
  j["model"]["lora"] = {{"r", 4}};  // PEFT's default for a Llama: q_proj and v_proj
  EXPECT_EQ(parse_ok(j).lora->adapters.targets,
            (std::array<bool, kNumLoraTargets>{true, false, true, false, false, false, false}));
}

// ---------------------------------------------------------------- batch rule

// A config with just the given batch keys (absent when < 0).
json batch(int64_t tbs, int64_t micro, int64_t accum) {
  json j = {{"model", {{"preset", "gpt2-tiny"}}}};
  if (tbs >= 0) j["train_batch_size"] = tbs;
  if (micro >= 0) j["train_micro_batch_size_per_gpu"] = micro;
  if (accum >= 0) j["gradient_accumulation_steps"] = accum;
  return j;
}

struct Batch {
  int64_t tbs;
  int micro, accum;
};

Batch resolved(const json& j, int world) {
  const JobConfig c = parse_ok(j, world);
  // The rule itself, whatever was given.
  EXPECT_EQ(c.train_batch_size, int64_t{c.micro_batch} * c.grad_accum * world);
  return {c.train_batch_size, c.micro_batch, c.grad_accum};
}

TEST(ConfigBatch, TotalAndMicroGiveAccumulation) {
  Batch b = resolved(batch(32, 4, -1), 1);
  EXPECT_EQ(b.accum, 8);
  b = resolved(batch(32, 4, -1), 2);
  EXPECT_EQ(b.accum, 4);
  EXPECT_EQ(b.micro, 4);
  EXPECT_EQ(b.tbs, 32);
}

TEST(ConfigBatch, TotalAndAccumulationGiveMicro) {
  Batch b = resolved(batch(24, -1, 3), 1);
  EXPECT_EQ(b.micro, 8);
  b = resolved(batch(24, -1, 3), 2);
  EXPECT_EQ(b.micro, 4);
  EXPECT_EQ(b.accum, 3);
}

TEST(ConfigBatch, MicroAndAccumulationGiveTotal) {
  EXPECT_EQ(resolved(batch(-1, 3, 5), 1).tbs, 15);
  EXPECT_EQ(resolved(batch(-1, 3, 5), 2).tbs, 30);
}

TEST(ConfigBatch, TotalAloneMeansNoAccumulation) {
  Batch b = resolved(batch(12, -1, -1), 1);
  EXPECT_EQ(b.accum, 1);
  EXPECT_EQ(b.micro, 12);
  b = resolved(batch(12, -1, -1), 2);
  EXPECT_EQ(b.accum, 1);
  EXPECT_EQ(b.micro, 6);
}

TEST(ConfigBatch, MicroAloneGivesMicroTimesWorld) {
  Batch b = resolved(batch(-1, 5, -1), 1);
  EXPECT_EQ(b.tbs, 5);
  EXPECT_EQ(b.accum, 1);
  b = resolved(batch(-1, 5, -1), 2);
  EXPECT_EQ(b.tbs, 10);
  EXPECT_EQ(b.accum, 1);
}

TEST(ConfigBatch, AllThreeMustAgree) {
  EXPECT_EQ(resolved(batch(16, 4, 2), 2).tbs, 16);
  // 4 * 2 * 1 = 8 != 16.
  EXPECT_TRUE(fails_with(parse_job_config(batch(16, 4, 2), 1).status(), absl::StatusCode::kInvalidArgument,
                         {"inconsistent", "train_batch_size"}));
}

TEST(ConfigBatch, TotalMustBeDivisible) {
  EXPECT_TRUE(rejected(batch(10, 4, -1), "train_batch_size"));       // 10 % 4
  EXPECT_TRUE(rejected(batch(12, 4, -1), "train_batch_size", 2));    // 12 % 8
  EXPECT_TRUE(rejected(batch(10, -1, 3), "train_batch_size"));       // 10 % 3
  EXPECT_TRUE(rejected(batch(9, -1, -1), "train_batch_size", 2));    // 9 % 2
}

TEST(ConfigBatch, NeedsTotalOrMicro) {
  EXPECT_TRUE(rejected(batch(-1, -1, -1), "train_batch_size"));
  EXPECT_TRUE(rejected(batch(-1, -1, 4), "train_batch_size"));
}

TEST(ConfigBatch, ZeroAndNegativeAreErrors) {
  EXPECT_TRUE(rejected(batch(0, -1, -1), "train_batch_size"));
  EXPECT_TRUE(rejected(batch(8, 0, -1), "train_micro_batch_size_per_gpu"));
  EXPECT_TRUE(rejected(batch(8, -1, 0), "gradient_accumulation_steps"));
  json j = batch(8, -1, -1);
  j["train_micro_batch_size_per_gpu"] = -2;
  EXPECT_TRUE(rejected(j, "train_micro_batch_size_per_gpu"));
  j = batch(-1, -1, -1);
  j["train_batch_size"] = -8;
  EXPECT_TRUE(rejected(j, "train_batch_size"));
}

// ---------------------------------------------------------------- unknown keys and types

TEST(ConfigKeys, UnknownKeysNameTheirFullPath) {
  json j = minimal();
  j["foo"] = 1;
  EXPECT_TRUE(rejected(j, "unknown key 'foo'"));

  j = minimal();
  j["zero_optimization"]["offload_optimizer"]["colour"] = "red";
  EXPECT_TRUE(rejected(j, "'zero_optimization.offload_optimizer.colour'"));

  j = minimal();
  j["optimizer"]["params"]["momentum"] = 0.9;
  EXPECT_TRUE(rejected(j, "'optimizer.params.momentum'"));

  j = minimal();
  j["run"]["checkpoint"]["every"] = 10;
  EXPECT_TRUE(rejected(j, "'run.checkpoint.every'"));

  j = minimal();
  j["model"]["layers"] = 4;
  EXPECT_TRUE(rejected(j, "'model.layers'"));
}

TEST(ConfigKeys, KnownSectionsWithAllKeysParse) {
  json j = minimal();
  j["run"] = {{"steps", 5}, {"seed", 7}, {"device", "cpu"}, {"log_format", "json"},
              {"checkpoint", {{"interval", 0}, {"keep", 2}}}, {"sample", {{"tokens", 8}, {"temperature", 0.5}}}};
  j["optimizer"] = {
      {"type", "Adam"},
      {"params", {{"lr", 0.01}, {"betas", {0.8, 0.95}}, {"eps", 1e-6}, {"weight_decay", 0.1}, {"adam_w_mode", false}}}};
  j["zero_optimization"] = {{"stage", 2}, {"overlap_comm", false}};
  j["gradient_clipping"] = 1.0;
  j["bf16"] = {{"enabled", true}};
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.run.steps, 5);
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.run.device, "cpu");
  EXPECT_EQ(c.run.log_format, LogFormat::kJson);
  EXPECT_EQ(c.run.checkpoint.keep, 2);
  EXPECT_EQ(c.run.sample_tokens, 8);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdam);
  EXPECT_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.optimizer.eps, 1e-6);
  EXPECT_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.precision, DType::kBF16);
}

TEST(ConfigKeys, TypeErrorsNameTheKeyPath) {
  json j = minimal();
  j["run"]["steps"] = "ten";
  EXPECT_TRUE(rejected(j, "run.steps"));

  j = minimal();
  j["optimizer"]["params"]["betas"] = {0.9};
  EXPECT_TRUE(rejected(j, "optimizer.params.betas"));

  j = minimal();
  j["optimizer"]["params"]["betas"] = "0.9,0.999";
  EXPECT_TRUE(rejected(j, "optimizer.params.betas"));

  j = minimal();
  j["optimizer"]["params"]["lr"] = "fast";
  EXPECT_TRUE(rejected(j, "optimizer.params.lr"));

  j = minimal();
  j["zero_optimization"]["overlap_comm"] = 1;
  EXPECT_TRUE(rejected(j, "zero_optimization.overlap_comm"));

  j = minimal();
  j["zero_optimization"] = 2;  // a section that is not an object
  EXPECT_TRUE(rejected(j, "zero_optimization"));
}

// ---------------------------------------------------------------- bad values

TEST(ConfigValues, ZeroSettingsOutsideTheirStagesAreRefused) {
  json j = minimal();
  j["zero_optimization"]["stage"] = -1;
  EXPECT_TRUE(rejected(j, "must be 0, 1, 2 or 3, got -1"));
  for (int stage : {0, 1, 2}) {
    j = minimal();
    j["zero_optimization"] = {{"stage", stage}, {"offload_param", {{"device", "cpu"}}}};
    EXPECT_TRUE(rejected(j, "zero_optimization.offload_param.device"));
    EXPECT_TRUE(rejected(j, absl::StrCat("needs stage 3, but stage is ", stage)));
  }
  // With stage 3 the same setting is accepted.
  j["zero_optimization"]["stage"] = 3;
  EXPECT_EQ(parse_ok(j).zero.offload_param.device, OffloadDevice::kCpu);
}

// super_offload acts where the host updates units during backward: stage 2
// or 3, the optimizer offloaded to cpu or nvme (the parameters anywhere).
TEST(ConfigValues, SuperOffloadOnlyWhereTheHostUpdatesDuringBackward) {
  const json host_update = {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"super_offload", true}}}};
  json j = minimal();
  j["zero_optimization"] = host_update;
  EXPECT_TRUE(parse_ok(j).zero.offload_optimizer.super_offload);
  j["zero_optimization"]["stage"] = 3;
  EXPECT_TRUE(parse_ok(j).zero.offload_optimizer.super_offload);
  j["zero_optimization"]["offload_optimizer"].merge_patch({{"device", "nvme"}, {"nvme_path", "/tmp"}});
  EXPECT_TRUE(parse_ok(j).zero.offload_optimizer.super_offload);
  j["zero_optimization"]["offload_param"] = {{"device", "cpu"}};
  EXPECT_TRUE(parse_ok(j).zero.offload_optimizer.super_offload);
  const std::string why = "zero_optimization.offload_optimizer.super_offload: needs stage 2 or 3";
  for (const json& bad : {json{{"stage", 1}}, json{{"offload_optimizer", {{"device", "none"}}}}}) {
    j = minimal();
    j["zero_optimization"] = host_update;
    j["zero_optimization"].merge_patch(bad);
    SCOPED_TRACE(j["zero_optimization"].dump());
    EXPECT_TRUE(rejected(j, why));
  }
  j = minimal();
  j["zero_optimization"] = host_update;
  j["zero_optimization"]["offload_optimizer"]["super_offload"] = "yes";
  EXPECT_TRUE(rejected(j, "zero_optimization.offload_optimizer.super_offload"));
  // It belongs to the optimizer's offload only.
  j = minimal();
  j["zero_optimization"] = {{"stage", 3}, {"offload_param", {{"device", "cpu"}, {"super_offload", true}}}};
  EXPECT_TRUE(rejected(j, "zero_optimization.offload_param.super_offload"));
}

// micro_batch_grads: "auto" (the default, also as the word itself, which
// zero_optimization otherwise reads as DeepSpeed's default), "fp32" or
// "compute"; "compute" needs stages 2 or 3, where micro-batches are summed
// after their reduction.
TEST(ConfigValues, MicroBatchGradsNamesHowMicroBatchesAreSummed) {
  json j = minimal();
  EXPECT_EQ(parse_ok(j).zero.micro_batch_grads, MicroBatchGrads::kAuto);
  for (const auto& [name, mode] : {std::pair{"auto", MicroBatchGrads::kAuto}, std::pair{"fp32", MicroBatchGrads::kF32},
                                   std::pair{"compute", MicroBatchGrads::kCompute}}) {
    j["zero_optimization"] = {{"stage", 2}, {"micro_batch_grads", name}};
    EXPECT_EQ(parse_ok(j).zero.micro_batch_grads, mode) << name;
  }
  j["zero_optimization"] = {{"stage", 2}, {"micro_batch_grads", "bf16"}};
  EXPECT_TRUE(rejected(j, "zero_optimization.micro_batch_grads: 'bf16' is not one of: auto, fp32, compute"));
  j["zero_optimization"] = {{"stage", 2}, {"micro_batch_grads", 16}};
  EXPECT_TRUE(rejected(j, "zero_optimization.micro_batch_grads"));
  for (int stage : {0, 1}) {
    j["zero_optimization"] = {{"stage", stage}, {"micro_batch_grads", "compute"}};
    EXPECT_TRUE(rejected(j, absl::StrCat("zero_optimization.micro_batch_grads: 'compute' needs stage 2 or 3, but "
                                         "stage is ",
                                         stage)));
    j["zero_optimization"]["micro_batch_grads"] = "fp32";
    EXPECT_EQ(parse_ok(j).zero.micro_batch_grads, MicroBatchGrads::kF32);
  }
}

// data.sources: datasets with their weights, in order; what is refused.
TEST(ConfigValues, DataSources) {
  json j = minimal();
  j["data"] = {{"kind", "tokens"},
               {"sources", {{{"path", "code/*.bin"}, {"weight", 3}}, {{"path", "chat.bin"}, {"weight", 0.5}}}}};
  JobConfig c = parse_ok(j);
  ASSERT_EQ(c.data.sources.size(), 2u);
  EXPECT_EQ(c.data.sources[0].path, "code/*.bin");
  EXPECT_EQ(c.data.sources[0].weight, 3);
  EXPECT_EQ(c.data.sources[1].path, "chat.bin");
  EXPECT_EQ(c.data.sources[1].weight, 0.5);
  EXPECT_TRUE(c.data.path.empty());
  j["data"]["sources"][1]["weight"] = 0;  // one source at 0 is never drawn; all at 0 is refused
  EXPECT_EQ(parse_ok(j).data.sources[1].weight, 0);
  EXPECT_TRUE(parse_ok(minimal()).data.sources.empty());

  auto with = [&](const json& sources) {
    json k = j;
    k["data"]["sources"] = sources;
    return k;
  };
  EXPECT_TRUE(
      rejected(with({{{"path", "a.bin"}, {"weight", -1}}}), "data.sources[0].weight: must be a number at least 0"));
  EXPECT_TRUE(rejected(with({{{"path", "a.bin"}, {"weight", 0}}, {{"path", "b.bin"}, {"weight", 0}}}),
                       "data.sources: no weight is above 0"));
  EXPECT_TRUE(rejected(with({{{"path", "a.bin"}}}), "data.sources[0].weight: required"));
  EXPECT_TRUE(rejected(with({{{"weight", 1}}}), "data.sources[0].path: required"));
  EXPECT_TRUE(rejected(with({{{"path", "a.bin"}, {"weight", 1}, {"share", 2}}}), "'data.sources[0].share'"));
  EXPECT_TRUE(rejected(with({"a.bin"}), "data.sources[0]: must be an object"));
  EXPECT_TRUE(rejected(with(json::array()), "data.sources: must be a list"));
  EXPECT_TRUE(rejected(with({{"path", "a.bin"}}), "data.sources: must be a list"));
  json both = j;
  both["data"]["path"] = "train.bin";
  EXPECT_TRUE(rejected(both, "data.path: and data.sources both name the data"));
  json fraction = j;
  fraction["data"]["eval"] = {{"fraction", 0.1}};
  EXPECT_TRUE(rejected(fraction, "data.eval: data.eval.fraction splits one dataset, not data.sources"));
  json synthetic = j;
  synthetic["data"]["kind"] = "synthetic";
  EXPECT_TRUE(rejected(synthetic, "data.sources: needs data.kind 'text' or 'tokens'"));
}

// data.eval and run.eval: a held-out set of its own or a fraction of the
// training windows, when it is evaluated, early stopping and keep_best;
// each bad value refused naming its key.
TEST(ConfigValues, EvalSettings) {
  json j = minimal();
  j["data"] = {{"kind", "tokens"}, {"path", "train.bin"}, {"eval", {{"path", "held.bin"}}}};
  j["run"]["eval"] = {{"interval", 50}, {"batches", 4}, {"patience", 3}};
  j["run"]["checkpoint"] = {{"dir", "ckpt"}, {"keep_best", true}};
  JobConfig c = parse_ok(j);
  ASSERT_TRUE(c.data.eval);
  EXPECT_EQ(c.data.eval->path, "held.bin");
  EXPECT_EQ(c.data.eval->kind, DataKind::kTokens);  // data's, by default
  EXPECT_EQ(c.data.eval->fraction, 0);
  EXPECT_EQ(c.run.eval.interval, 50);
  EXPECT_EQ(c.run.eval.batches, 4);
  EXPECT_EQ(c.run.eval.patience, 3);
  EXPECT_TRUE(c.run.checkpoint.keep_best);
  j["data"]["eval"] = {{"path", "held.txt"}, {"kind", "text"}};
  EXPECT_EQ(parse_ok(j).data.eval->kind, DataKind::kText);
  j["data"]["eval"] = {{"fraction", 0.05}};
  EXPECT_EQ(parse_ok(j).data.eval->fraction, 0.05);
  // A fraction of the synthetic task's windows is a held-out set too.
  json synthetic = minimal();
  synthetic["data"] = {{"kind", "synthetic"}, {"eval", {{"fraction", 0.1}}}};
  EXPECT_EQ(parse_ok(synthetic).data.eval->fraction, 0.1);
  EXPECT_EQ(parse_ok(minimal()).data.eval, std::nullopt);

  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    j["data"]["eval"] = {{"fraction", f}};
    EXPECT_TRUE(rejected(j, "data.eval.fraction: must be in (0, 1)")) << f;
  }
  j["data"]["eval"] = {{"fraction", 0.1}, {"path", "held.bin"}};
  EXPECT_TRUE(rejected(j, "data.eval.fraction: takes the held-out windows from data itself"));
  j["data"]["eval"] = json::object();
  EXPECT_TRUE(rejected(j, "data.eval.path: required"));
  j["data"]["eval"] = {{"path", "held.bin"}, {"kind", "synthetic"}};
  EXPECT_TRUE(rejected(j, "data.eval.kind"));
  synthetic["data"]["eval"] = {{"path", "held.bin"}};
  EXPECT_TRUE(rejected(synthetic, "data.eval.kind: required with synthetic data"));
  j["data"]["eval"] = {{"path", "held.bin"}, {"every", 5}};
  EXPECT_TRUE(rejected(j, "'data.eval.every'"));
  j["data"]["eval"] = {{"path", "held.bin"}};

  for (const char* key : {"interval", "batches", "patience"}) {
    json bad = j;
    bad["run"]["eval"][key] = -1;
    EXPECT_TRUE(rejected(bad, std::string("run.eval.") + key + ": must not be negative")) << key;
  }
  json bad = j;
  bad["run"]["eval"] = {{"patience", 2}};
  EXPECT_TRUE(rejected(bad, "run.eval.patience: counts evaluations during the run: it needs run.eval.interval"));
  bad = j;
  bad["run"]["checkpoint"].erase("dir");
  EXPECT_TRUE(rejected(bad, "run.checkpoint.keep_best: needs run.checkpoint.dir"));
  // Without a held-out set, nothing of run.eval or keep_best means anything.
  bad = j;
  bad["data"].erase("eval");
  EXPECT_TRUE(rejected(bad, "run.eval: evaluates data.eval, which the config does not give"));
  bad["run"].erase("eval");
  EXPECT_TRUE(
      rejected(bad, "run.checkpoint.keep_best: keeps the checkpoint of the lowest eval loss: it needs data.eval"));
}

TEST(ConfigValues, CheckpointSettings) {
  json j = minimal();
  j["run"]["checkpoint"] = {{"dir", "ckpt"}, {"interval", 10}, {"keep", 2}};
  j["run"]["resume"] = "latest";
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(*c.run.checkpoint.dir, "ckpt");
  EXPECT_EQ(c.run.checkpoint.interval, 10);
  EXPECT_EQ(c.run.checkpoint.keep, 2);
  EXPECT_TRUE(c.run.checkpoint.async);
  EXPECT_EQ(*c.run.resume, "latest");
  j["run"]["checkpoint"]["async"] = false;
  EXPECT_FALSE(parse_ok(j).run.checkpoint.async);
  j["run"]["checkpoint"]["async"] = "yes";
  EXPECT_TRUE(rejected(j, "run.checkpoint.async"));
  j["run"]["checkpoint"].erase("async");
  j["run"]["checkpoint"]["keep"] = 0;
  EXPECT_TRUE(rejected(j, "run.checkpoint.keep: must be at least 1"));
  j["run"]["checkpoint"]["keep"] = 1;
  j["run"]["checkpoint"]["interval"] = -5;
  EXPECT_TRUE(rejected(j, "run.checkpoint.interval"));
  j["run"]["checkpoint"]["interval"] = 0;
  j["run"]["checkpoint"]["dir"] = "";
  EXPECT_TRUE(rejected(j, "run.checkpoint.dir"));
  j = minimal();
  j["run"]["resume"] = "latest";
  EXPECT_TRUE(rejected(j, "\"latest\" needs run.checkpoint.dir"));
  j["run"]["resume"] = "";
  EXPECT_TRUE(rejected(j, "run.resume"));
  j["run"]["resume"] = "ckpt/step-00000010";
  EXPECT_EQ(*parse_ok(j).run.resume, "ckpt/step-00000010");
}

TEST(ConfigValues, OffloadSettings) {
  json j = minimal();
  j["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  EXPECT_EQ(parse_ok(j).zero.offload_optimizer.device, OffloadDevice::kCpu);
  j["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", "/scratch"}, {"buffer_count", 3}};
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kNvme);
  EXPECT_EQ(*c.zero.offload_optimizer.nvme_path, "/scratch");
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 3);
  // nvme without a path, an unknown device, no buffers.
  j["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}};
  EXPECT_TRUE(rejected(j, "zero_optimization.offload_optimizer.nvme_path"));
  EXPECT_TRUE(rejected(j, "is needed with device \"nvme\""));
  j["zero_optimization"]["offload_optimizer"] = {{"device", "disk"}};
  EXPECT_TRUE(rejected(j, "zero_optimization.offload_optimizer.device"));
  j["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}, {"buffer_count", 0}};
  EXPECT_TRUE(rejected(j, "zero_optimization.offload_optimizer.buffer_count"));
  j["zero_optimization"]["offload_optimizer"] = {{"device", "nvme"}, {"nvme_path", "/scratch"}};
  j["aio"] = {{"block_size", 1000}};
  EXPECT_TRUE(rejected(j, "aio.block_size: must be a positive multiple of 4096"));
  j["aio"] = {{"block_size", 65536}};
  j["run"]["checkpoint"] = {{"dir", "ckpt"}};
  EXPECT_EQ(parse_ok(j).aio_block_size, 65536);
}

TEST(ConfigValues, BadValuesNameTheirKey) {
  json j = minimal();
  j["optimizer"]["params"]["lr"] = -0.1;
  EXPECT_TRUE(rejected(j, "optimizer.params.lr"));

  j = minimal();
  j["zero_optimization"]["stage"] = 4;
  EXPECT_TRUE(rejected(j, "zero_optimization.stage"));

  j = minimal();
  j["data"]["seq_len"] = 65;  // gpt2-tiny block_size is 64
  EXPECT_TRUE(rejected(j, "data.seq_len"));
  j["data"]["seq_len"] = 64;
  EXPECT_EQ(parse_ok(j).data.seq_len, 64);

  j = minimal();
  j["run"]["steps"] = 0;
  EXPECT_TRUE(rejected(j, "run.steps"));

  j = minimal();
  j["data"]["kind"] = "parquet";
  EXPECT_TRUE(rejected(j, "data.kind"));

  j = minimal();
  j["run"]["log_format"] = "xml";
  EXPECT_TRUE(rejected(j, "run.log_format"));
}

TEST(ConfigValues, ValuesOutsideTheirMeaningfulRangeAreRefused) {
  // Sizes that must hold at least one element; 0 stays meaningful for the
  // prefetch (none) and the persistence threshold (nothing persists).
  for (const char* key : {"reduce_bucket_size", "sub_group_size"}) {
    json j = minimal();
    j["zero_optimization"][key] = 0;
    EXPECT_TRUE(fails_with(parse_job_config(j, 1).status(), absl::StatusCode::kInvalidArgument,
                           {std::string("zero_optimization.") + key, "must be at least 1, got 0"}));
    j["zero_optimization"][key] = 1;
    parse_ok(j);
  }
  for (const char* key : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"}) {
    json j = minimal();
    j["zero_optimization"][key] = 0;
    parse_ok(j);
    j["zero_optimization"][key] = -1;
    EXPECT_TRUE(rejected(j, std::string("zero_optimization.") + key + ": must not be negative, got -1"));
  }
  // The cosine schedule's ratios are fractions of the lr.
  for (const char* key : {"warmup_min_ratio", "cos_min_ratio"}) {
    for (double bad : {100.0, -5.0, 1.0000001}) {
      json j = minimal();
      j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 10}, {key, bad}}}};
      EXPECT_TRUE(rejected(j, std::string("scheduler.params.") + key + ": must be in [0, 1]")) << bad;
    }
    for (double good : {0.0, 0.5, 1.0}) {
      json j = minimal();
      j["scheduler"] = {{"type", "WarmupCosineLR"}, {"params", {{"total_num_steps", 10}, {key, good}}}};
      parse_ok(j);
    }
  }
  // Seeds are not negative; the largest int64 is one.
  for (const char* section : {"run", "data"}) {
    json j = minimal();
    j[section]["seed"] = -1;
    EXPECT_TRUE(rejected(j, std::string(section) + ".seed: must not be negative, got -1"));
    j[section]["seed"] = INT64_MAX;
    const JobConfig c = parse_ok(j);
    EXPECT_EQ(std::string(section) == "run" ? c.run.seed : c.data.seed, uint64_t(INT64_MAX));
  }
  // A path the synthetic task would never read is refused, not ignored.
  json j = minimal();
  j["data"] = {{"kind", "synthetic"}, {"path", "train.txt"}};
  EXPECT_TRUE(rejected(j, "data.path: is not read by data.kind 'synthetic'"));
  j["data"]["kind"] = "text";
  EXPECT_EQ(parse_ok(j).data.path, "train.txt");
}

TEST(ConfigValues, OptimizerSettings) {
  json j = minimal();
  j["optimizer"]["type"] = "AdamW8bit";
  EXPECT_EQ(parse_ok(j).optimizer.type, OptimizerType::kAdamW8bit);

  j["optimizer"]["type"] = "SGD";
  EXPECT_TRUE(rejected(j, "optimizer.type"));
  EXPECT_TRUE(rejected(j, "AdamW8bit"));  // the message lists the choices

  for (const json& betas : {json{1.0, 0.999}, json{-0.1, 0.999}, json{0.9, 1.0}, json{0.9, -1e-3}}) {
    j = minimal();
    j["optimizer"]["params"]["betas"] = betas;
    EXPECT_TRUE(rejected(j, "optimizer.params.betas")) << betas.dump();
    EXPECT_TRUE(rejected(j, "[0, 1)")) << betas.dump();
  }
  for (double eps : {-1e-8, 0.0}) {
    j = minimal();
    j["optimizer"]["params"]["eps"] = eps;
    EXPECT_TRUE(rejected(j, "optimizer.params.eps")) << eps;
  }
}

TEST(ConfigValues, Bf16AndFp16CannotBothBeEnabled) {
  json j = minimal();
  j["bf16"]["enabled"] = true;
  j["fp16"]["enabled"] = true;
  EXPECT_TRUE(fails_with(parse_job_config(j, 1).status(), absl::StatusCode::kInvalidArgument, {"bf16", "fp16"}));
  j["bf16"]["enabled"] = false;
  EXPECT_EQ(parse_ok(j).precision, DType::kF16);
}

TEST(ConfigValues, WarmupDecayNeedsTotalSteps) {
  json j = minimal();
  j["scheduler"] = {{"type", "WarmupDecayLR"}, {"params", {{"warmup_num_steps", 10}}}};
  EXPECT_TRUE(rejected(j, "scheduler.params.total_num_steps"));
  j["scheduler"]["params"]["total_num_steps"] = 100;
  const JobConfig c = parse_ok(j);
  EXPECT_EQ(c.scheduler.type, SchedulerType::kWarmupDecayLR);
  EXPECT_EQ(c.scheduler.total_num_steps, 100);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 10);
}

// ---------------------------------------------------------------- byte sizes

TEST(ConfigBytes, HostMemoryLimitForms) {
  const std::pair<json, uint64_t> cases[] = {
      {4096, 4096},
      {"512MiB", 536870912ull},
      {"12GiB", 12ull * 1024 * 1024 * 1024},
      {"1.5GB", 1500000000ull},
  };
  for (const auto& [value, bytes] : cases) {
    json j = minimal();
    j["run"]["host_memory_limit"] = value;
    const JobConfig c = parse_ok(j);
    ASSERT_TRUE(c.run.host_memory_limit.has_value()) << value.dump();
    EXPECT_EQ(*c.run.host_memory_limit, bytes) << value.dump();
  }
}

TEST(ConfigBytes, BadHostMemoryLimitIsNamed) {
  for (const json& bad : {json("12 potatoes"), json(-1), json(true)}) {
    json j = minimal();
    j["run"]["host_memory_limit"] = bad;
    EXPECT_TRUE(rejected(j, "run.host_memory_limit")) << bad.dump();
  }
}

// ---------------------------------------------------------------- integers as floats

TEST(ConfigIntegers, FloatsWithIntegerValuesAreAccepted) {
  json j = minimal();
  j["zero_optimization"]["reduce_bucket_size"] = 5e8;
  ASSERT_TRUE(j["zero_optimization"]["reduce_bucket_size"].is_number_float());
  EXPECT_EQ(parse_ok(j).zero.reduce_bucket_size, 500000000);

  j["zero_optimization"]["reduce_bucket_size"] = 5.5;
  EXPECT_TRUE(rejected(j, "zero_optimization.reduce_bucket_size"));

  j = minimal();
  j["run"]["steps"] = 10.0;
  EXPECT_EQ(parse_ok(j).run.steps, 10);
}

// ---------------------------------------------------------------- overrides

TEST(ConfigOverride, SetsANumber) {
  json j = minimal();
  ASSERT_TRUE(apply_override(j, "run.steps=50").ok());
  EXPECT_EQ(j["run"]["steps"], json(50));
  EXPECT_EQ(parse_ok(j).run.steps, 50);
}

TEST(ConfigOverride, SetsAnArray) {
  json j = minimal();
  ASSERT_TRUE(apply_override(j, "optimizer.params.betas=[0.9,0.99]").ok());
  EXPECT_EQ(j["optimizer"]["params"]["betas"], json({0.9, 0.99}));
  EXPECT_EQ(parse_ok(j).optimizer.beta2, 0.99);
}

TEST(ConfigOverride, BareWordIsAString) {
  json j = minimal();
  ASSERT_TRUE(apply_override(j, "model.preset=gpt2").ok());
  EXPECT_EQ(j["model"]["preset"], json("gpt2"));
  EXPECT_EQ(parse_ok(j).model.n_embd, 768);
}

// zero_optimization.accumulation: read in its three spellings, "layer"
// refused without checkpointing naming both keys, and the banner's line:
// none for the default, the order and "auto"'s reason where it resolved.
TEST(JobConfigTest, AccumulationIsReadRefusedAndSaid) {
  json j = minimal();
  j["activation_checkpointing"] = {{"enabled", true}};
  j["gradient_accumulation_steps"] = 4;
  j["train_batch_size"] = 32;
  for (const auto& [given, want] : {std::pair{"micro_batch", Accumulation::kMicroBatch},
                                    std::pair{"layer", Accumulation::kLayer}, std::pair{"auto", Accumulation::kAuto}}) {
    j["zero_optimization"]["accumulation"] = given;
    EXPECT_EQ(parse_ok(j).zero.accumulation, want) << given;
  }
  JobConfig cfg = parse_ok(j);
  EXPECT_EQ(accumulation_line(parse_ok(minimal())), "");
  cfg.zero.accumulation = Accumulation::kLayer;
  EXPECT_EQ(accumulation_line(cfg),
            "micro-batch order (accumulation layer): each layer's weights once a step up and once down, through the 4 "
            "micro-batches in turn, whose block inputs are all kept");
  cfg.zero.accumulation = Accumulation::kMicroBatch;
  cfg.accumulation_why = "a step has one micro-batch";
  EXPECT_EQ(
      accumulation_line(cfg),
      "micro-batch order (accumulation micro_batch): each through every layer | auto: a step has one micro-batch");
  j["zero_optimization"]["accumulation"] = "layer";
  j["activation_checkpointing"]["enabled"] = false;
  const auto refused = parse_job_config(j, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("zero_optimization.accumulation: 'layer' keeps each micro-batch's block "
                                            "inputs for its backward: it needs activation_checkpointing.enabled"),
            std::string::npos)
      << refused.status();
}

TEST(ConfigOverride, CreatesMissingObjects) {
  json j = minimal();
  ASSERT_FALSE(j.contains("zero_optimization"));
  ASSERT_TRUE(apply_override(j, "zero_optimization.stage=2").ok());
  EXPECT_EQ(j["zero_optimization"], json({{"stage", 2}}));
  EXPECT_EQ(parse_ok(j).zero.stage, 2);
}

TEST(ConfigOverride, MalformedAssignmentsAreErrors) {
  json j = minimal();
  const json before = j;
  EXPECT_EQ(apply_override(j, "noequals").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(apply_override(j, "=5").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(j, before);
}

TEST(ConfigOverride, PathThroughANonObjectIsAnError) {
  json j = minimal();
  j["run"]["steps"] = 5;
  const absl::Status s = apply_override(j, "run.steps.x=1");
  EXPECT_TRUE(fails_with(s, absl::StatusCode::kInvalidArgument, {"steps"}));
  EXPECT_EQ(j["run"]["steps"], json(5));
}

// Found by fuzz/fuzz_job_config: a config that is not an object, given an
// override, read the key before the first.
TEST(ConfigOverride, AConfigThatIsNotAnObjectTakesNoOverride) {
  for (json j : {json(5), json::array({1}), json("text")}) {
    const json before = j;
    const absl::Status s = apply_override(j, "run.steps=1");
    EXPECT_TRUE(fails_with(s, absl::StatusCode::kInvalidArgument, {"the config is not a JSON object"})) << s;
    EXPECT_EQ(j, before);
  }
}

// Found by fuzz/fuzz_job_config: a bare word that is not UTF-8 became a
// string that no message quoting it could print (nlohmann type_error 316).
TEST(ConfigOverride, AnAssignmentThatIsNotUtf8IsRefused) {
  for (const std::string bad : {"optimizer.params.lr=\xff", "run.na\xfeme=1", "run.steps=\"\xc3\""}) {
    json j = minimal();
    const json before = j;
    const absl::Status s = apply_override(j, bad);
    EXPECT_TRUE(fails_with(s, absl::StatusCode::kInvalidArgument, {"not UTF-8"})) << s;
    EXPECT_EQ(j, before);
  }
}

TEST(ConfigOverride, UnknownKeyFailsInParse) {
  json j = minimal();
  ASSERT_TRUE(apply_override(j, "run.colour=\"blue\"").ok());
  EXPECT_TRUE(rejected(j, "run.colour"));
}

// ---------------------------------------------------------------- loading files

class ConfigFileTest : public testing::TempDirTest {};

TEST_F(ConfigFileTest, LoadsAFile) {
  const std::string p = write("job.json", minimal().dump(2));
  auto r = load_job_config(p, {}, 1);
  ASSERT_TRUE(r.ok()) << std::string(r.status().message());
  EXPECT_EQ(r->micro_batch, 8);
  EXPECT_EQ(r->preset, "gpt2-tiny");
}

TEST_F(ConfigFileTest, MissingFileIsNotFound) {
  const std::string p = path("nope.json");
  EXPECT_TRUE(fails_with(load_job_config(p, {}, 1).status(), absl::StatusCode::kNotFound, {p}));
}

TEST_F(ConfigFileTest, InvalidJsonNamesTheFile) {
  const std::string p = write("bad.json", "{\"model\": {\"preset\": \"gpt2-tiny\"},, }");
  EXPECT_TRUE(fails_with(load_job_config(p, {}, 1).status(), absl::StatusCode::kInvalidArgument, {p}));
}

TEST_F(ConfigFileTest, ParseErrorsArePrefixedWithTheFile) {
  json j = minimal();
  j["run"]["steps"] = 0;
  const std::string p = write("zero_steps.json", j.dump());
  const absl::Status s = load_job_config(p, {}, 1).status();
  ASSERT_TRUE(fails_with(s, absl::StatusCode::kInvalidArgument, {p, "run.steps"}));
  const std::string msg(s.message());
  EXPECT_LT(msg.find(p), msg.find("run.steps"));  // the file comes first
}

TEST_F(ConfigFileTest, OverridesApplyInOrder) {
  const std::string p = write("job.json", minimal().dump());
  auto r = load_job_config(p, {"run.steps=5", "run.steps=7", "train_batch_size=16"}, 2);
  ASSERT_TRUE(r.ok()) << std::string(r.status().message());
  EXPECT_EQ(r->run.steps, 7);  // last wins
  EXPECT_EQ(r->train_batch_size, 16);
  EXPECT_EQ(r->micro_batch, 8);  // 16 / world 2
}

TEST_F(ConfigFileTest, OverrideErrorsAndUnknownOverrideKeys) {
  const std::string p = write("job.json", minimal().dump());
  EXPECT_FALSE(load_job_config(p, {"noequals"}, 1).ok());
  EXPECT_TRUE(fails_with(load_job_config(p, {"run.nonsense=1"}, 1).status(), absl::StatusCode::kInvalidArgument,
                         {p, "run.nonsense"}));
}

}  // namespace
}  // namespace zerod
