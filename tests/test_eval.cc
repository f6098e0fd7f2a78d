// The held-out set (data.eval, Trainer::evaluate) on the CPU: its loss is
// the mean cross-entropy of the model's own logits over its targets (each
// document of a packed window run alone), it leaves training bitwise as it
// was, run.eval.batches takes that many global batches, a fraction's
// windows are never trained on, and bad held-out sets are refused before
// training.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/data/eval_windows.h"
#include "runtime/data/token_shard.h"
#include "runtime/engine/trainer.h"
#include "runtime/model/gpt.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

constexpr int kT = 16;

// A plain token file of n ids below 250.
void write_tokens(const std::string& path, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> ids(n);
  for (uint16_t& id : ids) id = static_cast<uint16_t>(rng() % 250);
  ASSERT_TRUE(write_token_shard(path, ids).ok());
}

// `preset` over a plain token file of 1200 ids, windows of 16, 3 steps of
// 4 windows; then `overrides`.
JobConfig job(const std::string& preset, const std::string& train, const std::vector<std::string>& overrides) {
  nlohmann::json j = testing::tiny_job();
  j["model"] = {{"preset", preset}, {"vocab_size", 256}, {"block_size", kT}};
  j["data"] = {{"kind", "tokens"}, {"path", train}, {"seq_len", kT}};
  j["run"]["steps"] = 3;
  return testing::config_with(j, overrides);
}

// The reference: every window of the held-out set read as training reads
// it, each document in it (split where a position is 0) run alone through
// forward_logits on the trained weights, and -log softmax(logits)[target]
// summed in double over the counted targets.
double reference_loss(const JobConfig& cfg, const std::vector<float>& params, const Dataset& data,
                      const std::vector<int64_t>& windows, int64_t* targets_out) {
  testing::CpuRig rig;
  auto model = Gpt::create(cfg.model, 1, kT, DType::kF32, false, rig.device, *rig.kernels);
  EXPECT_TRUE(model.ok()) << model.status();
  auto w = FlatWeights::create(&(*model)->layout(), DType::kF32, params.data(), rig.device, *rig.kernels);
  EXPECT_TRUE(w.ok()) << w.status();
  WindowReader reader(&data.tokens, kT, data.windowed, data.packed);
  const int V = cfg.model.vocab_size;
  double sum = 0;
  int64_t counted = 0;
  std::vector<int32_t> in(kT), tg(kT), pos(kT);
  std::vector<float> logits(int64_t(kT) * V);
  for (int64_t win : windows) {
    reader.read(win, in.data(), tg.data(), pos.data());
    for (int s = 0; s < kT;) {
      int e = s + 1;
      while (e < kT && pos[e] != 0) ++e;
      EXPECT_TRUE((*model)->forward_logits(*w, in.data() + s, 1, e - s, logits.data(), false).ok());
      for (int t = s; t < e; ++t) {
        if (tg[t] < 0) continue;
        const float* z = logits.data() + int64_t(t - s) * V;
        double mx = z[0], se = 0;
        for (int v = 1; v < V; ++v) mx = std::max(mx, double(z[v]));
        for (int v = 0; v < V; ++v) se += std::exp(double(z[v]) - mx);
        sum += mx + std::log(se) - z[tg[t]];
        ++counted;
      }
      s = e;
    }
  }
  *targets_out = counted;
  return sum / double(counted);
}

// j with `patch` merged in (RFC 7386).
nlohmann::json patched(nlohmann::json j, const nlohmann::json& patch) {
  j.merge_patch(patch);
  return j;
}

class Eval : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    train_ = path("train.bin");
    held_ = path("held.bin");
    packed_ = path("packed.bin");
    write_tokens(train_, 1200, 1);
    write_tokens(held_, 200, 2);
    testing::write_packed_instruction_shard(packed_, 9, kT);
  }
  // zero-worker's job NAME.json: gpt2-tiny on train_ in windows of 16,
  // `eval` held out, then `patch` (the run's settings).
  std::string worker_job(const std::string& name, const std::string& eval, const nlohmann::json& patch) {
    const nlohmann::json j =
        patched(testing::tiny_job(),
                {{"model", {{"vocab_size", 256}, {"block_size", kT}}},
                 {"data", {{"kind", "tokens"}, {"path", train_}, {"seq_len", kT}, {"eval", {{"path", eval}}}}}});
    return write(name + ".json", patched(j, patch).dump());
  }
  std::string train_, held_, packed_;
};

// A learning rate too high for the tests' random data: the held-out loss
// turns after a few steps.
const nlohmann::json kTurning = {{"optimizer", {{"params", {{"lr", 0.02}}}}}};

// After training (GPT-2 and Llama), the held-out loss of a token file of
// its own, of a packed shard and of a fraction of the training windows:
// the reference's within 1e-6, over the same targets.
TEST_F(Eval, LossIsTheMeanCrossEntropyOfTheModelsOwnLogits) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    for (const std::string& eval :
         {"{\"path\": \"" + held_ + "\"}", "{\"path\": \"" + packed_ + "\"}", std::string("{\"fraction\": 0.2}")}) {
      SCOPED_TRACE(::testing::Message() << preset << ", data.eval " << eval);
      const JobConfig cfg = job(preset, train_, {"data.eval=" + eval});
      auto t = testing::make_trainer(cfg);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int i = 0; i < cfg.run.steps; ++i) ASSERT_TRUE((*t)->step().ok());
      auto got = (*t)->evaluate();
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->step, cfg.run.steps);
      auto params = (*t)->master_params();
      ASSERT_TRUE(params.ok());
      // The set: every window of its own file, or the training file's held-out ones.
      const bool fraction = cfg.data.eval->fraction > 0;
      auto data = load_dataset(fraction ? cfg.data : eval_dataset_config(cfg.data), cfg.model.vocab_size);
      ASSERT_TRUE(data.ok()) << data.status();
      const int64_t all = WindowReader(&data->tokens, kT, data->windowed, data->packed).num_windows();
      std::vector<int64_t> windows;
      for (int64_t w = 0; w < all; ++w) {
        if (!fraction || held_out_window(cfg.data.seed, w, 0.2)) windows.push_back(w);
      }
      ASSERT_GT(windows.size(), 2u);
      int64_t targets = 0;
      const double want = reference_loss(cfg, *params, *data, windows, &targets);
      EXPECT_EQ(got->targets, targets);
      EXPECT_NEAR(got->loss, want, 1e-6 * want);
    }
  }
}

// Training with an evaluation after every step is bitwise training without:
// each step's loss and the final weights, at stage 0, at stage 3 with its
// parameters on the host over two micro-batches a step, and in bf16 with a
// packed held-out set (the model then packed too).
TEST_F(Eval, TrainingIsBitwiseTheSameWithEvaluations) {
  const std::string off = path("off");
  for (const auto& [preset, o] :
       {std::pair<std::string, std::vector<std::string>>{"gpt2-tiny", {}},
        {"llama-tiny", testing::joined({"zero_optimization.stage=3", "gradient_accumulation_steps=2"},
                                       testing::params_on("cpu", off))},
        {"gpt2-tiny", {"bf16.enabled=true"}}}) {
    SCOPED_TRACE(::testing::Message() << preset << (o.empty() ? "" : ", " + o[0]));
    const std::string eval = o.size() == 1 ? packed_ : held_;
    const JobConfig cfg = job(preset, train_, testing::joined(o, {"data.eval={\"path\": \"" + eval + "\"}"}));
    std::vector<std::vector<double>> losses(2);
    std::vector<std::vector<float>> params(2);
    for (int evaluating : {0, 1}) {
      auto t = testing::make_trainer(cfg);
      ASSERT_TRUE(t.ok()) << t.status();
      for (int i = 0; i < cfg.run.steps; ++i) {
        auto s = (*t)->step();
        ASSERT_TRUE(s.ok()) << s.status();
        losses[evaluating].push_back(s->loss);
        if (evaluating) ASSERT_TRUE((*t)->evaluate().ok());
      }
      params[evaluating] = *(*t)->master_params();
    }
    EXPECT_TRUE(testing::same_bits(params[0], params[1]));
    ASSERT_EQ(losses[0].size(), losses[1].size());
    for (size_t i = 0; i < losses[0].size(); ++i) EXPECT_EQ(losses[0][i], losses[1][i]) << "step " << i + 1;
  }
}

// run.eval.batches: that many global batches of the set (windows 0..2B-1
// of 4 a batch take their targets alone); all of it by default, and
// evaluating twice gives the same bits.
TEST_F(Eval, BatchesTakesThatManyGlobalBatchesOfTheSet) {
  const std::string eval = "data.eval={\"path\": \"" + packed_ + "\"}";
  auto all = testing::make_trainer(job("gpt2-tiny", train_, {eval}));
  auto two = testing::make_trainer(job("gpt2-tiny", train_, {eval, "run.eval.batches=2"}));
  ASSERT_TRUE(all.ok() && two.ok());
  const EvalResult a = *(*all)->evaluate(), again = *(*all)->evaluate(), b = *(*two)->evaluate();
  EXPECT_EQ(a.loss, again.loss);
  EXPECT_EQ(a.targets, again.targets);
  auto data = load_dataset(eval_dataset_config(job("gpt2-tiny", train_, {eval}).data), 256);
  ASSERT_TRUE(data.ok());
  WindowReader reader(&data->tokens, kT, true, true);
  int64_t first8 = 0, every = 0;
  for (int64_t w = 0; w < reader.num_windows(); ++w) {
    const int64_t n = reader.read(w, nullptr, nullptr, nullptr);
    every += n;
    if (w < 8) first8 += n;
  }
  EXPECT_EQ(a.targets, every);
  EXPECT_EQ(b.targets, first8);
  EXPECT_NE(a.loss, b.loss);
}

// data.eval.fraction: each window held out with about that probability, the
// same for a seed everywhere; the training walk never reads one of them,
// and the held-out set is exactly them.
TEST_F(Eval, AFractionsWindowsAreNeverTrainedOn) {
  const int64_t n = 20000;
  const int64_t held = held_out_windows(5, n, 0.1);
  EXPECT_NEAR(double(held) / n, 0.1, 0.01);
  EXPECT_EQ(held_out_windows(5, n, 0.0), 0);
  EXPECT_NE(held_out_windows(6, n, 0.1), held);
  // A stream whose window w holds the id w in each of its places.
  const int T = 4, W = 300;
  std::vector<uint16_t> ids;
  for (int w = 0; w < W; ++w) ids.insert(ids.end(), T, static_cast<uint16_t>(w));
  ids.push_back(0);
  const TokenStream stream(ids);
  auto loader = DataLoader::create(&stream, T, 5, 0, 1, MemoryAccountant::global(), false, false, 0.25);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->num_windows(), W - held_out_windows(5, W, 0.25));
  std::vector<int32_t> in(T), tg(T);
  std::vector<int> seen(W);
  for (int64_t i = 0; i < 3 * loader->num_windows(); ++i) {
    loader->next_batch(1, in.data(), tg.data());
    ASSERT_FALSE(held_out_window(5, in[0], 0.25)) << "window " << in[0] << " trained on";
    ++seen[in[0]];
  }
  for (int w = 0; w < W; ++w) EXPECT_EQ(seen[w], held_out_window(5, w, 0.25) ? 0 : 3) << "window " << w;
}

// The evaluations of a run's JSON events, and what run.eval.patience
// makes of them: the best so far after each, and the evaluation after
// which `patience` have passed without a lower loss (none: -1).
struct Evals {
  std::vector<nlohmann::json> events;
  int stop = -1;
};
Evals evals_of(const std::string& out, int patience) {
  Evals e{testing::of_kind(testing::events(out), "eval")};
  double best = 0;
  for (int i = 0, since = 0; i < static_cast<int>(e.events.size()) && e.stop < 0; ++i) {
    const double loss = e.events[i]["loss"];
    since = i == 0 || loss < best ? 0 : since + 1;
    if (since == 0) best = loss;
    EXPECT_EQ(e.events[i]["best_loss"], best) << "evaluation " << i;
    if (patience > 0 && since == patience) e.stop = i;
  }
  return e;
}

// A run whose held-out loss turns (a learning rate too high for its data)
// stops after run.eval.patience evaluations without a lower one, exits 0,
// says where the best was, and keeps that step's checkpoint in
// run.checkpoint.dir/best, which exports as any checkpoint does.
TEST_F(Eval, PatienceStopsTheRunAndKeepBestKeepsTheBestCheckpoint) {
  const std::string ckpt = path("ckpt");
  const std::string config = worker_job("job", held_,
                                        patched(kTurning, {{"run",
                                                            {{"steps", 60},
                                                             {"eval", {{"interval", 2}, {"patience", 3}}},
                                                             {"checkpoint", {{"dir", ckpt}, {"keep_best", true}}}}}}));
  const testing::WorkerResult r = testing::run_worker_with({"--config", config, "--log-format", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const Evals e = evals_of(r.out, 3);
  ASSERT_GE(e.stop, 3) << "the held-out loss never stopped improving: " << r.out;
  const nlohmann::json& last = e.events[e.stop];
  const int64_t stopped_at = last["step"], best_step = last["best_step"];
  EXPECT_EQ(e.events.size(), static_cast<size_t>(e.stop + 1)) << "evaluated after stopping";
  const auto stops = testing::of_kind(testing::events(r.out), "early_stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0]["step"], stopped_at);
  EXPECT_EQ(stops[0]["best_step"], best_step);
  EXPECT_EQ(stops[0]["best_checkpoint"], ckpt + "/best");
  const auto summary = testing::of_kind(testing::events(r.out), "summary").at(0);
  EXPECT_EQ(summary["steps"], stopped_at);
  EXPECT_EQ(summary["stopped_early"], true);
  EXPECT_EQ(summary["best_eval_step"], best_step);
  EXPECT_EQ(summary["best_eval_loss"], last["best_loss"]);
  // The best step's checkpoint alone under best/; the run's last under ckpt.
  EXPECT_EQ(*list_checkpoints(ckpt + "/best"), std::vector<int64_t>{best_step});
  EXPECT_EQ(*latest_checkpoint(ckpt), ckpt + "/" + checkpoint_dir_name(stopped_at));
  const testing::WorkerResult x =
      testing::run_worker_with({"export", "--checkpoint", ckpt + "/best", "--out", path("exported")});
  EXPECT_EQ(x.code, kExitOk) << x.err;
  EXPECT_TRUE(std::filesystem::exists(path("exported/model.safetensors")));

  // The same run to the step it stopped at: patience runs out at its last
  // step, which ends the run anyway, and is no early stop.
  const testing::WorkerResult to_end = testing::run_worker_with({"--config", config, "--log-format", "json", "--set",
                                                                 "run.steps=" + std::to_string(stopped_at), "--set",
                                                                 "run.checkpoint.dir=\"" + path("ckpt2") + "\""});
  ASSERT_EQ(to_end.code, kExitOk) << to_end.err;
  EXPECT_TRUE(testing::of_kind(testing::events(to_end.out), "early_stop").empty()) << to_end.out;
  EXPECT_FALSE(testing::of_kind(testing::events(to_end.out), "summary").at(0).contains("stopped_early"));
}

// The last step is evaluated before its save, whatever the interval, and
// that save is made once: its manifest carries both evaluations (after steps
// 4 and 6), and the best one's save under best/ takes nothing from it.
TEST_F(Eval, TheLastStepIsEvaluatedBeforeItsSave) {
  const std::string ckpt = path("ckpt");
  const std::string config = worker_job("job", held_,
                                        {{"run",
                                          {{"steps", 6},
                                           {"eval", {{"interval", 4}}},
                                           {"checkpoint", {{"dir", ckpt}, {"interval", 3}, {"keep_best", true}}}}}});
  const testing::WorkerResult r = testing::run_worker_with({"--config", config, "--log-format", "json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto evals = testing::of_kind(testing::events(r.out), "eval");
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]["step"], 4);
  EXPECT_EQ(evals[1]["step"], 6);
  std::vector<int64_t> regular;
  for (const nlohmann::json& c : testing::of_kind(testing::events(r.out), "checkpoint")) {
    if (c["path"].get<std::string>().find("/best/") == std::string::npos) regular.push_back(c["step"]);
  }
  EXPECT_EQ(regular, (std::vector<int64_t>{3, 6}));
  const nlohmann::json manifest =
      nlohmann::json::parse(testing::read_file(*latest_checkpoint(ckpt) + "/manifest.json"));
  EXPECT_EQ(manifest["eval"]["evaluations"], 2);
  EXPECT_EQ(manifest["eval"]["best_loss"], evals[1]["best_loss"]);
}

// A run stopped after step 4 and resumed carries its evaluations' record:
// its later evaluations, its early stop and its last checkpoint are the
// uninterrupted run's, bit for bit (the patience count included: without
// it the resumed run would stop later).
TEST_F(Eval, AResumedRunCarriesTheBestAndThePatienceCount) {
  const auto config = [&](const std::string& name, int steps) {
    return worker_job(name, held_,
                      patched(kTurning, {{"run",
                                          {{"steps", steps},
                                           {"eval", {{"interval", 2}, {"patience", 3}}},
                                           {"checkpoint", {{"dir", path(name)}, {"interval", 2}}},
                                           {"resume", "latest"}}}}));
  };
  const testing::WorkerResult whole =
      testing::run_worker_with({"--config", config("whole", 60), "--log-format", "json"});
  ASSERT_EQ(whole.code, kExitOk) << whole.err;
  const Evals w = evals_of(whole.out, 3);
  ASSERT_GE(w.stop, 3);
  // Stopped after the first evaluation of the three without a lower loss.
  const int cut = w.stop - 2;
  const int64_t at = w.events[cut]["step"];
  ASSERT_EQ(testing::run_worker_with({"--config", config("parts", static_cast<int>(at)), "--log-format", "json"}).code,
            kExitOk);
  const testing::WorkerResult rest =
      testing::run_worker_with({"--config", config("parts", 60), "--log-format", "json"});
  ASSERT_EQ(rest.code, kExitOk) << rest.err;
  const auto later = testing::of_kind(testing::events(rest.out), "eval");
  ASSERT_EQ(later.size(), w.events.size() - cut - 1);
  for (size_t i = 0; i < later.size(); ++i) EXPECT_EQ(later[i], w.events[cut + 1 + i]) << "evaluation " << i;
  const auto stop = testing::of_kind(testing::events(rest.out), "early_stop");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0], testing::of_kind(testing::events(whole.out), "early_stop").at(0));
  testing::expect_same_files(*latest_checkpoint(path("whole")), *latest_checkpoint(path("parts")));

  // Resumed once more, from the checkpoint of its early stop: it stops at
  // once, training nothing.
  const testing::WorkerResult again =
      testing::run_worker_with({"--config", config("parts", 60), "--log-format", "json"});
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_TRUE(testing::of_kind(testing::events(again.out), "step").empty()) << again.out;
  const auto stopped = testing::of_kind(testing::events(again.out), "early_stop");
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0]["step"], stop[0]["step"]);
  EXPECT_EQ(stopped[0]["best_step"], stop[0]["best_step"]);
}

// A run killed (SIGKILL) while it evaluates after step 3, then resumed from
// its step-2 checkpoint (saved in the foreground, so that it is published
// before the kill): its evaluations, its record and its last and best
// checkpoints are the uninterrupted run's, bit for bit.
TEST_F(Eval, KilledDuringAnEvaluationAndResumedIsTheUninterruptedRun) {
  // A held-out set large enough that an evaluation takes a second or two.
  const std::string big = path("big.bin");
  write_tokens(big, 120000, 4);
  const auto config = [&](const std::string& name) {
    return worker_job(name, big,
                      {{"run",
                        {{"steps", 6},
                         {"eval", {{"interval", 3}}},
                         {"checkpoint", {{"dir", path(name)}, {"interval", 2}, {"keep_best", true}, {"async", false}}},
                         {"resume", "latest"}}},
                       {"steps_per_print", 1}});
  };
  const testing::WorkerResult whole = testing::run_worker_with({"--config", config("whole"), "--log-format", "json"});
  ASSERT_EQ(whole.code, kExitOk) << whole.err;

  // The real binary, its pid first (the shell execs it), killed once step
  // 3's event is out and before its evaluation's is.
  const std::string killed = config("killed");
  FILE* p =
      popen(("echo $$; exec " ZEROD_WORKER_BIN " --config " + killed + " --log-format json 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[1 << 16];
  ASSERT_NE(fgets(line, sizeof line, p), nullptr);
  const pid_t pid = std::stoi(line);
  std::string seen;
  while (fgets(line, sizeof line, p) != nullptr) {
    seen += line;
    const auto e = testing::events(line);
    if (!e.empty() && e[0]["event"] == "step" && e[0]["step"] == 3) {
      ASSERT_EQ(kill(pid, SIGKILL), 0);
      break;
    }
  }
  while (fgets(line, sizeof line, p) != nullptr) seen += line;
  pclose(p);
  ASSERT_TRUE(testing::of_kind(testing::events(seen), "eval").empty()) << "the evaluation finished first: " << seen;
  EXPECT_TRUE(testing::of_kind(testing::events(seen), "summary").empty()) << seen;
  EXPECT_EQ(latest_checkpoint(path("killed")).value_or(""), path("killed") + "/" + checkpoint_dir_name(2));

  const testing::WorkerResult resumed = testing::run_worker_with({"--config", killed, "--log-format", "json"});
  ASSERT_EQ(resumed.code, kExitOk) << resumed.err;
  EXPECT_EQ(testing::of_kind(testing::events(resumed.out), "eval"),
            testing::of_kind(testing::events(whole.out), "eval"));
  const auto summary = [](const std::string& out) {
    nlohmann::json s = testing::of_kind(testing::events(out), "summary").at(0);
    return nlohmann::json{s["eval_loss"], s["best_eval_loss"], s["best_eval_step"], s["final_loss"]};
  };
  EXPECT_EQ(summary(resumed.out), summary(whole.out));
  testing::expect_same_files(*latest_checkpoint(path("whole")), *latest_checkpoint(path("killed")));
  testing::expect_same_files(*latest_checkpoint(path("whole") + "/best"), *latest_checkpoint(path("killed") + "/best"));
}

// A held-out set with no target, a fraction holding out no window or every
// one, a packed shard of another window, a file that is not there: each
// refused when the trainer is built, naming the set.
TEST_F(Eval, BadHeldOutSetsAreRefusedBeforeTraining) {
  const std::string masked = path("masked.bin"), other = path("other.bin");
  ASSERT_TRUE(write_window_shard(masked, std::vector<uint32_t>(3 * kT, 5 | kNotTarget), kT).ok());
  testing::write_packed_instruction_shard(other, 4, 2 * kT);
  const std::string tiny = path("tiny.bin");
  write_tokens(tiny, 3 * kT + 1, 3);
  for (const auto& [train, eval, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {train_, "{\"path\": \"" + masked + "\"}", "data.eval.path '" + masked + "': no window of it has a target"},
           {train_, "{\"fraction\": 1e-9}", "data.eval.fraction 1e-09 holds out none of the 74 windows data has"},
           {tiny, "{\"fraction\": 0.999999}", "holds out every window of the 3 data has, leaving none to train on"},
           {train_, "{\"path\": \"" + other + "\"}", "other.bin"},
           {train_, "{\"path\": \"" + path("none.bin") + "\"}",
            "data.eval.path '" + path("none.bin") + "' does not exist"}}) {
    SCOPED_TRACE(eval);
    auto t = testing::make_trainer(job("gpt2-tiny", train, {"data.eval=" + eval}));
    ASSERT_FALSE(t.ok());
    const bool missing = want.find("does not exist") != std::string::npos;
    EXPECT_EQ(t.status().code(), missing ? absl::StatusCode::kNotFound : absl::StatusCode::kInvalidArgument)
        << t.status();
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status();
  }
}

}  // namespace
}  // namespace zerod
