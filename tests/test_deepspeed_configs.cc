// DeepSpeed configs as other projects ship them (tests/fixtures/
// deepspeed_configs, sources in SOURCES.md, outcomes in EXPECTED.json), and
// the key table's classes: honoured, accepted with no effect, refused off
// DeepSpeed's default; every problem of a config in one run; "auto" filled
// in as the Hugging Face Trainer does; Adam's DeepSpeed meaning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "runtime/config/deepspeed_keys.h"
#include "runtime/config/job_config.h"
#include "runtime/core/strict_json.h"
#include "runtime/core/whole_file.h"
#include "tests/temp_dir.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCorpus = ZEROD_SOURCE_DIR "/tests/fixtures/deepspeed_configs";

json read_json(const std::string& path) { return *parse_strict_json(*read_whole_file(path), path); }

std::vector<std::string> corpus_files() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kCorpus)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".json") && name != "EXPECTED.json") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// zerod's own sections, and every nvme_path pointed at `nvme` and the
// monitors' output_path at `monitors` (the shipped ones name the authors'
// disks).
json with_zerod_sections(json j, const std::string& nvme, const std::string& monitors) {
  j["model"] = {{"preset", "gpt2-tiny"}};
  j["data"] = {{"kind", "synthetic"}, {"seq_len", 16}};
  j["run"] = {{"steps", 1}, {"device", "cpu"}, {"sample", {{"tokens", 0}}}};
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    json* z = j.contains("zero_optimization") ? &j["zero_optimization"] : nullptr;
    if (z && z->is_object() && z->contains(section) && (*z)[section].is_object() &&
        (*z)[section].contains("nvme_path")) {
      (*z)[section]["nvme_path"] = nvme;
    }
  }
  for (const char* section : {"tensorboard", "csv_monitor"}) {
    if (j.contains(section) && j[section].is_object() && j[section].contains("output_path")) {
      j[section]["output_path"] = monitors;
    }
  }
  return j;
}

// Whether a shipped config turns a monitor on.
bool enables(const json& j, const char* section) {
  return j.contains(section) && j[section].is_object() && j[section].value("enabled", false) == true;
}

class ShippedConfig : public testing::TempDirTest, public ::testing::WithParamInterface<std::string> {};

// Each config trains a step as shipped, with only zerod's sections added, or
// is refused (exit 2) in one run naming every problem EXPECTED.json lists.
TEST_P(ShippedConfig, TrainsOrIsRefusedNamingEveryProblem) {
  const std::string name = GetParam();
  const json expected = read_json(kCorpus + "/EXPECTED.json").at(name);
  fs::create_directories(path("nvme"));
  const json shipped = read_json(kCorpus + "/" + name);
  const json job = with_zerod_sections(shipped, path("nvme"), path("monitors"));
  const std::string config = write("config.json", job.dump());
  const testing::WorkerResult r = testing::run_worker_with({"--config", config});
  if (expected == "trains") {
    EXPECT_EQ(r.code, kExitOk) << r.err;
    // A monitor it turns on writes its files where it says.
    if (enables(shipped, "tensorboard")) {
      const fs::path dir = fs::path(path("monitors")) / job["tensorboard"].value("job_name", "DeepSpeedJobName");
      ASSERT_TRUE(fs::is_directory(dir)) << dir;
      EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << dir;
      EXPECT_NE(fs::directory_iterator(dir)->path().filename().string().find("tfevents"), std::string::npos);
    }
    if (enables(shipped, "csv_monitor")) {
      const fs::path dir = fs::path(path("monitors")) / job["csv_monitor"].value("job_name", "DeepSpeedJobName");
      EXPECT_TRUE(fs::exists(dir / "Train_Samples_train_loss.csv")) << dir;
    }
    return;
  }
  EXPECT_EQ(r.code, kExitBadInput) << r.out;
  if (expected.size() > 1)
    EXPECT_NE(r.err.find(absl::StrCat(expected.size(), " problems:")), std::string::npos) << r.err;
  for (const json& key : expected) {
    const std::string k = key.get<std::string>();
    EXPECT_TRUE(r.err.find(k + ": ") != std::string::npos || r.err.find("'" + k + "'") != std::string::npos)
        << k << " not named in: " << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, ShippedConfig, ::testing::ValuesIn(corpus_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return absl::StrReplaceAll(info.param, {{"-", "_"}, {".", "_"}});
                         });

TEST(ShippedConfigs, AtLeastThirtyEachWithItsSourceAndTheConfigDocCount) {
  const std::vector<std::string> files = corpus_files();
  EXPECT_GE(files.size(), 30u);
  const json expected = read_json(kCorpus + "/EXPECTED.json");
  const std::string sources = *read_whole_file(kCorpus + "/SOURCES.md");
  int trains = 0;
  for (const std::string& f : files) {
    EXPECT_TRUE(expected.contains(f)) << f;
    EXPECT_NE(sources.find("| " + f + " |"), std::string::npos) << f << " has no source";
    trains += expected.value(f, json()) == "trains";
  }
  EXPECT_EQ(expected.size(), files.size());
  const std::string doc = *read_whole_file(ZEROD_SOURCE_DIR "/docs/config.md");
  EXPECT_NE(doc.find(absl::StrCat(trains, " of the ", files.size(), " DeepSpeed configs")), std::string::npos)
      << "docs/config.md should say " << trains << " of the " << files.size() << " DeepSpeed configs";
}

json base() { return {{"model", {{"preset", "gpt2-tiny"}}}, {"train_batch_size", 8}}; }

absl::StatusOr<JobConfig> parse(const json& j, int world = 1) { return parse_job_config(j, world); }

// Two configs that between them set every key the table says zerod
// honours (some exclude each other); each parses, so each such key is read.
TEST(DeepSpeedKeys, EveryHonouredKeyIsRead) {
  const std::vector<std::pair<std::string, json>> a = {{"train_batch_size", 8},
                                                       {"train_micro_batch_size_per_gpu", 4},
                                                       {"gradient_accumulation_steps", 2},
                                                       {"steps_per_print", 5},
                                                       {"wall_clock_breakdown", true},
                                                       {"gradient_clipping", 1.0},
                                                       {"communication_data_type", "fp32"},
                                                       {"fp16.enabled", true},
                                                       {"fp16.loss_scale", 0},
                                                       {"fp16.initial_scale_power", 12},
                                                       {"fp16.loss_scale_window", 100},
                                                       {"fp16.hysteresis", 2},
                                                       {"fp16.consecutive_hysteresis", true},
                                                       {"fp16.min_loss_scale", 1},
                                                       {"bf16.enabled", false},
                                                       {"bfloat16.enabled", false},
                                                       {"data_types.grad_accum_dtype", "fp32"},
                                                       {"zero_optimization.stage", 3},
                                                       {"zero_optimization.reduce_bucket_size", 1000},
                                                       {"zero_optimization.stage3_prefetch_bucket_size", 1000},
                                                       {"zero_optimization.stage3_param_persistence_threshold", 10},
                                                       {"zero_optimization.sub_group_size", 1000},
                                                       {"zero_optimization.overlap_comm", true},
                                                       {"zero_optimization.offload_optimizer.device", "nvme"},
                                                       {"zero_optimization.offload_optimizer.nvme_path", "/tmp"},
                                                       {"zero_optimization.offload_optimizer.pin_memory", true},
                                                       {"zero_optimization.offload_optimizer.buffer_count", 4},
                                                       {"zero_optimization.offload_optimizer.super_offload", true},
                                                       {"zero_optimization.micro_batch_grads", "compute"},
                                                       {"zero_optimization.accumulation", "layer"},
                                                       {"zero_optimization.offload_param.device", "nvme"},
                                                       {"zero_optimization.offload_param.nvme_path", "/tmp"},
                                                       {"zero_optimization.offload_param.pin_memory", true},
                                                       {"zero_optimization.offload_param.buffer_count", 5},
                                                       {"activation_checkpointing.enabled", true},
                                                       {"activation_checkpointing.cpu_checkpointing", true},
                                                       {"aio.block_size", 1048576},
                                                       {"aio.queue_depth", 8},
                                                       {"flops_profiler.enabled", true},
                                                       {"optimizer.type", "Adam"},
                                                       {"optimizer.params.lr", 1e-3},
                                                       {"optimizer.params.betas", {0.9, 0.99}},
                                                       {"optimizer.params.eps", 1e-8},
                                                       {"optimizer.params.weight_decay", 0.1},
                                                       {"optimizer.params.adam_w_mode", true},
                                                       {"optimizer.params.bias_correction", true},
                                                       {"scheduler.type", "WarmupDecayLR"},
                                                       {"scheduler.params.warmup_min_lr", 0},
                                                       {"scheduler.params.warmup_max_lr", 1e-3},
                                                       {"scheduler.params.warmup_num_steps", 10},
                                                       {"scheduler.params.warmup_type", "linear"},
                                                       {"scheduler.params.total_num_steps", 100},
                                                       {"tensorboard.enabled", true},
                                                       {"tensorboard.output_path", "runs"},
                                                       {"tensorboard.job_name", "a"},
                                                       {"csv_monitor.enabled", true},
                                                       {"csv_monitor.output_path", "runs"},
                                                       {"csv_monitor.job_name", "b"}};
  const std::vector<std::pair<std::string, json>> b = {{"train_batch_size", 8},
                                                       {"zero_optimization.stage", 2},
                                                       {"zero_optimization.prefetch_bucket_size", 1000},
                                                       {"zero_optimization.param_persistence_threshold", 10},
                                                       {"zero_optimization.cpu_offload", true},
                                                       {"zero_optimization.cpu_offload_param", false},
                                                       {"scheduler.type", "WarmupCosineLR"},
                                                       {"scheduler.params.warmup_min_ratio", 0.1},
                                                       {"scheduler.params.cos_min_ratio", 0.01},
                                                       {"scheduler.params.total_num_steps", 100}};
  std::set<std::string> covered;
  for (const auto* keys : {&a, &b}) {
    json j = base();
    for (const auto& [k, v] : *keys) {
      j[json::json_pointer("/" + absl::StrReplaceAll(k, {{".", "/"}}))] = v;
      covered.insert(k);
    }
    const auto c = parse(j);
    EXPECT_TRUE(c.ok()) << c.status();
  }
  for (const DeepSpeedKey& k : deepspeed_keys()) {
    if (k.use == KeyUse::kHonoured) EXPECT_TRUE(covered.count(k.path)) << k.path << " is honoured but not tried";
  }
}

// What honoured keys of other spellings and sections do.
TEST(DeepSpeedKeys, OlderSpellingsAndTheProfilerAreHonoured) {
  json j = base();
  j["zero_optimization"] = {{"stage", 2}, {"cpu_offload", true}, {"prefetch_bucket_size", 123}};
  j["bfloat16"] = {{"enabled", true}};
  j["flops_profiler"] = {{"enabled", true}, {"profile_step", 3}};
  const JobConfig c = *parse(j);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 123);
  EXPECT_EQ(c.precision, DType::kBF16);
  EXPECT_TRUE(c.wall_clock_breakdown);
  j["zero_optimization"]["stage3_prefetch_bucket_size"] = 5;
  j["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  const std::string both(parse(j).status().message());
  EXPECT_NE(both.find("zero_optimization.prefetch_bucket_size: is another spelling of "), std::string::npos) << both;
  EXPECT_NE(both.find("zero_optimization.cpu_offload: is the older spelling of offload_optimizer.device"),
            std::string::npos)
      << both;
}

// Every key accepted with no effect parses at values other than its
// default, and a run with a dozen of them (and the monitors, which write
// files) trains bitwise as one without.
TEST(DeepSpeedKeys, KeysWithNoEffectChangeNothing) {
  for (const DeepSpeedKey& k : deepspeed_keys()) {
    if (k.use != KeyUse::kNoEffect) continue;
    std::string key = k.path;
    if (key.ends_with(".*")) key = key.substr(0, key.size() - 2) + ".anything";
    json j = base();
    j[json::json_pointer("/" + absl::StrReplaceAll(key, {{".", "/"}}))] = 7;
    EXPECT_TRUE(parse(j).ok()) << key << ": " << parse(j).status();
  }
}

class DeepSpeedRun : public testing::TempDirTest {
 protected:
  // The losses of a 4-step run of `j` (JSON output).
  std::vector<double> losses(json j) {
    j["data"] = {{"kind", "synthetic"}, {"seq_len", 16}};
    j["run"] = {{"steps", 4}, {"device", "cpu"}, {"log_format", "json"}, {"sample", {{"tokens", 0}}}};
    j["steps_per_print"] = 1;
    const testing::WorkerResult r = testing::run_worker_with({"--config", write("job.json", j.dump())});
    EXPECT_EQ(r.code, kExitOk) << r.err;
    std::vector<double> l;
    for (const json& e : testing::of_kind(testing::events(r.out), "step")) l.push_back(e["loss"].get<double>());
    EXPECT_EQ(l.size(), 4u);
    return l;
  }
};

TEST_F(DeepSpeedRun, KeysWithNoEffectTrainBitwiseAsWithout) {
  json j = base();
  j["zero_optimization"] = {{"stage", 2}};
  const std::vector<double> plain = losses(j);
  j["prescale_gradients"] = true;
  j["gradient_predivide_factor"] = 4.0;
  j["zero_allow_untested_optimizer"] = true;
  j["memory_breakdown"] = true;
  j["zero_optimization"]["contiguous_gradients"] = false;
  j["zero_optimization"]["reduce_scatter"] = false;
  j["zero_optimization"]["allgather_bucket_size"] = 1000;
  j["zero_optimization"]["stage3_max_live_parameters"] = 1000;
  j["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = true;
  j["activation_checkpointing"] = {{"partition_activations", true}, {"number_checkpoints", 4}, {"profile", true}};
  j["tensorboard"] = {{"enabled", true}, {"output_path", path("tb")}};
  j["csv_monitor"] = {{"enabled", true}, {"output_path", path("csv")}};
  j["wandb"] = {{"enabled", false}, {"project", "p"}};
  j["bf16"] = {{"enabled", false}, {"loss_scale", 0}};
  EXPECT_EQ(losses(j), plain);
}

// On the CPU the layer inputs are in host memory already: the same bits.
TEST_F(DeepSpeedRun, CpuCheckpointingOnTheCpuChangesNothing) {
  json j = base();
  j["activation_checkpointing"] = {{"enabled", true}};
  const std::vector<double> in_place = losses(j);
  j["activation_checkpointing"]["cpu_checkpointing"] = true;
  EXPECT_EQ(losses(j), in_place);
}

// DeepSpeed's Adam is AdamW unless adam_w_mode is false, which is Adam with
// L2 weight decay; the two differ at weight decay 0.1.
TEST_F(DeepSpeedRun, AdamIsAdamWUnlessAdamWModeIsFalse) {
  json j = base();
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"weight_decay", 0.1}}}};
  const std::vector<double> adamw = losses(j);
  j["optimizer"]["type"] = "Adam";
  EXPECT_EQ(losses(j), adamw);
  j["optimizer"]["type"] = "adam";  // DeepSpeed's names in any case
  EXPECT_EQ(losses(j), adamw);
  j["optimizer"]["params"]["adam_w_mode"] = false;
  const std::vector<double> l2 = losses(j);
  EXPECT_NE(l2, adamw);
  EXPECT_EQ(parse(j)->optimizer.type, OptimizerType::kAdam);
  j["optimizer"]["type"] = "AdamW";  // AdamW is decoupled whatever adam_w_mode says, as in DeepSpeed
  EXPECT_EQ(losses(j), adamw);
  j["optimizer"]["params"]["bias_correction"] = false;
  EXPECT_NE(losses(j), adamw);
}

// Keys for features zerod does not have: accepted at DeepSpeed's default,
// refused at any other value naming the key and the feature.
TEST(DeepSpeedKeys, KeysForWhatZerodDoesNotDoAreRefusedOffTheirDefault) {
  for (const DeepSpeedKey& k : deepspeed_keys()) {
    if (k.use != KeyUse::kDefaultOnly) continue;
    const json pointer_value = json::parse(k.default_json);
    json j = base();
    if (std::string_view(k.path).starts_with("scheduler.")) j["scheduler"]["type"] = "WarmupLR";
    const json::json_pointer at("/" + absl::StrReplaceAll(std::string(k.path), {{".", "/"}}));
    if (!pointer_value.is_null()) {
      j[at] = pointer_value;
      EXPECT_TRUE(parse(j).ok()) << k.path << " at its default: " << parse(j).status();
      j[at] = "auto";
      EXPECT_TRUE(parse(j).ok()) << k.path << " at \"auto\": " << parse(j).status();
    }
    j[at] = pointer_value.is_boolean() ? json(!pointer_value.get<bool>()) : json({{"enabled", true}});
    if (pointer_value.is_number()) j[at] = -5;
    if (pointer_value.is_string()) j[at] = "other";
    const std::string message(parse(j).status().message());
    EXPECT_NE(message.find(std::string(k.path) + ": "), std::string::npos) << message;
    EXPECT_NE(message.find(k.what), std::string::npos) << message;
  }
}

// Ten problems, one run: each named, sorted by key path.
TEST(DeepSpeedKeys, EveryProblemIsReportedInOneRun) {
  json j = base();
  j["nonsense"] = 1;
  j["gradient_clipping"] = -1;
  j["steps_per_print"] = 0;
  j["optimizer"] = {{"type", "AdamW"}, {"params", {{"lr", "fast"}, {"eps", 0}}}};
  j["zero_optimization"] = {{"stage", 7}, {"reduce_scatter", true}, {"zero_quantized_weights", true}};
  j["fp16"] = {{"hysteresis", 0}};
  j["run"] = {{"steps", 0}};
  j["sparse_attention"] = {{"mode", "fixed"}};
  j["data"] = {{"seq_len", 1000}};
  const std::string message(parse(j).status().message());
  const std::vector<std::string> paths = {"data.seq_len",
                                          "fp16.hysteresis",
                                          "gradient_clipping",
                                          "'nonsense'",
                                          "optimizer.params.eps",
                                          "optimizer.params.lr",
                                          "run.steps",
                                          "sparse_attention",
                                          "steps_per_print",
                                          "zero_optimization.stage",
                                          "zero_optimization.zero_quantized_weights"};
  EXPECT_NE(message.find("11 problems:"), std::string::npos) << message;
  size_t at = 0;
  for (const std::string& p : paths) {
    const size_t found = message.find(p, at);
    EXPECT_NE(found, std::string::npos) << p << " missing or out of order in: " << message;
    if (found != std::string::npos) at = found;
  }
}

// "auto" as the Hugging Face Trainer fills it in with its defaults: from
// each other, the world size, the model's hidden size and run.steps.
TEST(DeepSpeedKeys, AutoIsFilledInAsTheTrainerDoes) {
  json j = read_json(kCorpus + "/transformers-ds_config_zero2.json");
  j["model"] = {{"preset", "gpt2-tiny"}};
  j["run"] = {{"steps", 30}};
  const absl::StatusOr<JobConfig> c = parse(j, /*world=*/2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->micro_batch, 8);
  EXPECT_EQ(c->grad_accum, 1);
  EXPECT_EQ(c->train_batch_size, 16);
  EXPECT_EQ(c->gradient_clipping, 1.0);
  EXPECT_EQ(c->optimizer.lr, 5e-5);
  EXPECT_EQ(c->optimizer.beta2, 0.999);
  EXPECT_EQ(c->optimizer.weight_decay, 0.0);
  EXPECT_EQ(c->scheduler.warmup_max_lr, 5e-5);
  EXPECT_EQ(c->scheduler.warmup_num_steps, 0);
  EXPECT_EQ(c->precision, DType::kF32);
  EXPECT_EQ(c->zero.reduce_bucket_size, 200000000);  // given: 2e8
  json filled = json::object();
  for (const auto& [path, value] : c->auto_filled) filled[path] = value;
  EXPECT_EQ(filled["train_batch_size"], 16);
  EXPECT_EQ(filled["optimizer.params.betas"], json({0.9, 0.999}));
  EXPECT_EQ(filled["fp16.enabled"], false);

  json z3 = base();
  z3["zero_optimization"] = {{"stage", 3},
                             {"reduce_bucket_size", "auto"},
                             {"stage3_prefetch_bucket_size", "auto"},
                             {"stage3_param_persistence_threshold", "auto"},
                             {"sub_group_size", "auto"}};
  z3["scheduler"] = {{"type", "WarmupDecayLR"}, {"params", {{"total_num_steps", "auto"}}}};
  z3["run"] = {{"steps", 30}};
  const JobConfig c3 = *parse(z3);
  EXPECT_EQ(c3.zero.reduce_bucket_size, 4096);           // 64^2
  EXPECT_EQ(c3.zero.stage3_prefetch_bucket_size, 3686);  // 0.9 * 64^2
  EXPECT_EQ(c3.zero.stage3_param_persistence_threshold, 640);
  EXPECT_EQ(c3.zero.sub_group_size, 1000000000);  // DeepSpeed's default
  EXPECT_EQ(c3.scheduler.total_num_steps, 30);

  // Where nothing fills it in, the message says what "auto" is and how to set it.
  json own = base();
  own["run"] = {{"steps", "auto"}};
  const std::string message(parse(own).status().message());
  EXPECT_NE(message.find("run.steps: \"auto\" is a value the Hugging Face Trainer fills in"), std::string::npos)
      << message;
  EXPECT_NE(message.find("--set run.steps="), std::string::npos) << message;
  // run.device's own "auto" (the GPU when there is one) is not the Trainer's.
  json device = base();
  device["run"] = {{"device", "auto"}};
  const absl::StatusOr<JobConfig> d = parse(device);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->run.device, "auto");
  EXPECT_TRUE(d->auto_filled.empty());
}

// docs/config.md's key table is this table (ZEROD_DOCS_RECORD=1 writes it).
TEST(DeepSpeedKeys, TheConfigDocTableIsTheKeyTable) {
  const std::string path = ZEROD_SOURCE_DIR "/docs/config.md";
  std::string doc = *read_whole_file(path);
  const std::string begin = "<!-- deepspeed-keys:begin -->\n", end = "<!-- deepspeed-keys:end -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string table = deepspeed_keys_markdown();
  if (std::getenv("ZEROD_DOCS_RECORD")) {
    doc.replace(b + begin.size(), e - b - begin.size(), table);
    std::ofstream(path, std::ios::binary) << doc;
  }
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), table)
      << "docs/config.md's key table differs: run ZEROD_DOCS_RECORD=1 ctest -R TheConfigDocTableIsTheKeyTable";
}

}  // namespace
}  // namespace zerod
