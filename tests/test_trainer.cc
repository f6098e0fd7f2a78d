// The training engine end to end on small synthetic jobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/engine/trainer.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

JobConfig make_config(const std::vector<std::string>& overrides = {}) {
  return testing::config_with(testing::tiny_job(), overrides);
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
  uint64_t activations_peak = 0, optimizer_peak = 0;
};

TrainRun train(const JobConfig& cfg, int steps) {
  MemoryAccountant& acct = MemoryAccountant::global();
  acct.reset_peaks();
  TrainRun r;
  auto t = testing::make_trainer(cfg);
  EXPECT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < steps; ++i) {
    auto s = (*t)->step();
    EXPECT_TRUE(s.ok()) << s.status();
    r.losses.push_back(s->loss);
  }
  r.params = *(*t)->master_params();
  r.activations_peak = acct.peak(Tier::kHost, Category::kActivations);
  r.optimizer_peak = acct.peak(Tier::kHost, Category::kOptimizer);
  return r;
}

TEST(Trainer, SameSeedGivesIdenticalLosses) {
  const JobConfig cfg = make_config();
  const TrainRun a = train(cfg, 5), b = train(cfg, 5);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  const TrainRun c = train(make_config({"run.seed=8"}), 5);
  EXPECT_NE(a.losses, c.losses);
}

void expect_checkpointing_is_exact(const std::vector<std::string>& overrides) {
  std::vector<std::string> with = overrides;
  with.push_back("activation_checkpointing.enabled=true");
  const TrainRun plain = train(make_config(overrides), 4), ckpt = train(make_config(with), 4);
  EXPECT_EQ(plain.losses, ckpt.losses);
  EXPECT_EQ(plain.params, ckpt.params);
  EXPECT_LT(ckpt.activations_peak, plain.activations_peak);
}

TEST(Trainer, CheckpointingIsBitwiseExactWithLessActivationMemory) {
  expect_checkpointing_is_exact({"model.preset=custom", "model.n_layer=4", "model.n_head=2", "model.n_embd=32",
                                 "model.vocab_size=256", "model.block_size=32"});
}

TEST(Trainer, CheckpointingIsBitwiseExactInBf16) { expect_checkpointing_is_exact({"bf16.enabled=true"}); }

TEST(Trainer, AccumulationMatchesOneLargeMicroBatch) {
  // 2 x 4 micro-steps and 8 x 1 see the same 8 windows per step; sums differ
  // only in fp32 rounding order. Tolerance: 1e-5 relative on losses, 2e-5
  // absolute on parameters (Adam steps are ~lr = 3e-3).
  const TrainRun accum = train(make_config({"train_micro_batch_size_per_gpu=2", "gradient_accumulation_steps=4"}), 4);
  const TrainRun single = train(make_config({"train_micro_batch_size_per_gpu=8", "gradient_accumulation_steps=1"}), 4);
  ASSERT_EQ(accum.losses.size(), single.losses.size());
  for (size_t i = 0; i < accum.losses.size(); ++i) EXPECT_NEAR(accum.losses[i], single.losses[i], 1e-5 * single.losses[i]);
  double max_diff = 0;
  for (size_t i = 0; i < accum.params.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(accum.params[i] - single.params[i])));
  }
  EXPECT_LT(max_diff, 2e-5);
  // And the check has teeth: a different batch moves the parameters much more.
  const TrainRun other = train(make_config({"train_micro_batch_size_per_gpu=8", "data.seed=2"}), 4);
  double other_diff = 0;
  for (size_t i = 0; i < other.params.size(); ++i) {
    other_diff = std::max(other_diff, static_cast<double>(std::fabs(other.params[i] - single.params[i])));
  }
  EXPECT_GT(other_diff, 100 * max_diff);
}

TEST(Trainer, MemoryIsAccountedByCategory) {
  const MemoryAccountant& acct = MemoryAccountant::global();
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    const bool bf16 = std::string(precision) == "bf16";
    auto t = testing::make_trainer(make_config({bf16 ? "bf16.enabled=true" : "bf16.enabled=false"}));
    ASSERT_TRUE(t.ok());
    // Each unit is padded to a multiple of the partition's alignment.
    const uint64_t n = Partition((*t)->layout(), 1).padded_numel();
    ASSERT_GE(n, uint64_t((*t)->num_params()));
    ASSERT_LT(n, uint64_t((*t)->num_params() + Partition::kAlign * (*t)->layout().num_units()));
    // bf16: 2-byte parameters, fp32 gradients, fp32 master (padded like the
    // parameters) + m + v (for the real parameters only).
    const uint64_t params = (*t)->num_params();
    EXPECT_EQ(acct.current(Tier::kHost, Category::kParams), n * (bf16 ? 2 : 4));
    EXPECT_EQ(acct.current(Tier::kHost, Category::kGrads), n * 4);
    EXPECT_EQ(acct.current(Tier::kHost, Category::kOptimizer), (bf16 ? n * 4 : 0) + params * 8);
    EXPECT_GT(acct.current(Tier::kHost, Category::kActivations), 0u);
  }
  EXPECT_EQ(acct.current_total(Tier::kHost), 0u);  // everything was given back
}

// A world of one at stage 0 steps on the device's stream: the host waits
// once a step, for its losses and its gradients' norm, where stage 1
// (whose stores take the gradients on the host) waits after each pass and
// again for the update. On threaded, delayed streams the two give the same
// bits: fp32, bf16, and fp16, whose loss scale the host sets from the norm
// it reads (the first steps overflow), with clipping and micro-batches.
TEST(Trainer, AWorldOfOneStepsOnTheStreamWaitingOnceAStep) {
  constexpr int kSteps = 4, kMicroBatches = 3;
  for (const char* precision : {"bf16.enabled=false", "bf16.enabled=true", "fp16.enabled=true"}) {
    SCOPED_TRACE(precision);
    auto run = [&](const char* stage, std::vector<uint64_t>& waits) {
      CpuDeviceOptions o;
      o.threaded = o.device_only_memory = true;
      CpuDevice device(MemoryAccountant::global(), o);
      const JobConfig cfg = make_config({precision, stage, "gradient_accumulation_steps=" + std::to_string(kMicroBatches),
                                         "train_batch_size=" + std::to_string(4 * kMicroBatches)});
      auto t = Trainer::create(cfg, nullptr, &device);
      EXPECT_TRUE(t.ok()) << t.status();
      TrainRun r;
      for (int i = 0; i < kSteps; ++i) {
        const uint64_t before = device.host_waits().count;
        auto st = (*t)->step();
        EXPECT_TRUE(st.ok()) << st.status();
        waits.push_back(device.host_waits().count - before);
        r.losses.push_back(st->loss);
        r.losses.push_back(st->grad_norm);
        r.losses.push_back(st->loss_scale);
      }
      r.params = *(*t)->master_params();
      return r;
    };
    std::vector<uint64_t> on_stream, on_host;
    const TrainRun a = run("zero_optimization.stage=0", on_stream), b = run("zero_optimization.stage=1", on_host);
    EXPECT_EQ(on_stream, std::vector<uint64_t>(kSteps, 1));
    for (uint64_t w : on_host) EXPECT_GE(w, kMicroBatches + 2u);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_TRUE(testing::same_bits(a.params, b.params));
  }
  // wall_clock_breakdown names that wait: one a step, as a host row.
  CpuDeviceOptions o;
  o.threaded = o.device_only_memory = true;
  CpuDevice device(MemoryAccountant::global(), o);
  auto t = Trainer::create(make_config({"wall_clock_breakdown=true"}), nullptr, &device);
  ASSERT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*t)->step().ok());
  const Profiler::Totals host = (*t)->profiler()->host_totals();
  ASSERT_TRUE(host.count("waiting for the device"));
  EXPECT_EQ(host.at("waiting for the device").count, 2);
  EXPECT_LE(host.at("waiting for the device").ms, host.at("step").ms);
}

TEST(Trainer, Fp16OverflowSkipsStepsAndBacksOff) {
  // 2^40 overflows fp16 activation gradients: steps are skipped, leaving the
  // parameters untouched, and the scale halves after each hysteresis-exhausted
  // overflow until training proceeds.
  auto t = *testing::make_trainer(make_config({"fp16.enabled=true", "fp16.initial_scale_power=40", "fp16.hysteresis=2"}));
  const std::vector<float> before = *t->master_params();
  auto s1 = *t->step();
  EXPECT_TRUE(s1.skipped);
  EXPECT_EQ(s1.loss_scale, std::ldexp(1.0, 40));
  EXPECT_TRUE(std::isinf(s1.grad_norm));
  EXPECT_EQ(*t->master_params(), before);
  auto s2 = *t->step();  // hysteresis used up: this overflow halves the scale
  EXPECT_TRUE(s2.skipped);
  EXPECT_EQ(s2.loss_scale, std::ldexp(1.0, 40));
  auto s3 = *t->step();
  EXPECT_EQ(s3.loss_scale, std::ldexp(1.0, 39));
  double scale = s3.loss_scale;
  bool trained = false;
  for (int i = 0; i < 60 && !trained; ++i) {
    auto s = *t->step();
    EXPECT_LE(s.loss_scale, scale);
    scale = s.loss_scale;
    trained = !s.skipped;
  }
  EXPECT_TRUE(trained);
  EXPECT_NE(*t->master_params(), before);
}

TEST(Trainer, Fp16AndBf16Train) {
  for (const char* flag : {"fp16.enabled=true", "bf16.enabled=true"}) {
    SCOPED_TRACE(flag);
    const TrainRun r = train(make_config({flag, "optimizer.params.lr=1e-2"}), 30);
    EXPECT_LT(r.losses.back(), 0.7 * r.losses.front());
  }
}

TEST(Trainer, EightBitAdamWTrainsLikeAdamWInAQuarterOfTheStateMemory) {
  constexpr int kSteps = 600;
  // The trajectories of this small task are chaotic: a 1e-4 relative change
  // of lr moves AdamW's final loss by up to 6%. So each optimizer runs at
  // three learning rates that close and the means are compared.
  const char* const kLrs[] = {"optimizer.params.lr=1e-2", "optimizer.params.lr=1.0001e-2",
                              "optimizer.params.lr=0.9999e-2"};
  auto tail_mean = [](const std::vector<double>& l) {  // last 50 steps: less batch noise
    double s = 0;
    for (size_t i = l.size() - 50; i < l.size(); ++i) s += l[i];
    return s / 50;
  };
  struct Result {
    double first_loss = 0, final_loss = 0;
    uint64_t optimizer_peak = 0;
  };
  auto with = [&](const char* type) {
    Result r;
    for (const char* lr : kLrs) {
      const TrainRun run =
          train(make_config({"train_micro_batch_size_per_gpu=8", lr, std::string("optimizer.type=") + type}), kSteps);
      r.first_loss = run.losses.front();
      r.final_loss += tail_mean(run.losses) / std::size(kLrs);
      r.optimizer_peak = run.optimizer_peak;
    }
    return r;
  };
  const Result fp32 = with("AdamW"), q8 = with("AdamW8bit");
  std::printf("loss %.4f -> %.4f (AdamW), %.4f (AdamW8bit); optimizer bytes %llu vs %llu (%.3f)\n", fp32.first_loss,
              fp32.final_loss, q8.final_loss, static_cast<unsigned long long>(fp32.optimizer_peak),
              static_cast<unsigned long long>(q8.optimizer_peak), double(q8.optimizer_peak) / fp32.optimizer_peak);
  EXPECT_LT(fp32.final_loss, 0.5 * fp32.first_loss);  // it trained
  // The margin: 8-bit states may cost at most 3% of AdamW's final loss
  // (measured: 0.6% below).
  EXPECT_LT(q8.final_loss, 1.03 * fp32.final_loss);
  EXPECT_LE(double(q8.optimizer_peak), 0.27 * double(fp32.optimizer_peak));
}

TEST(Trainer, BatchedGenerationGivesEachPromptsOwnGreedyTokens) {
  // Prompts of three lengths, more than one pass holds at the longest: each
  // row's greedy continuation equals that prompt continued alone.
  const JobConfig cfg = make_config();
  auto t = *testing::make_trainer(cfg);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(t->step().ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 40; ++i) prompts.push_back(std::vector<int32_t>(1 + i % 3 * 5, 10 + i));
  const int max_new = 6;
  ASSERT_LT(cfg.micro_batch * cfg.data.seq_len / (11 + max_new - 1), 13) << "the longest prompts take two passes";
  auto all = t->generate(prompts, max_new, 0, /*stop=*/-1);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = t->generate({prompts[i]}, max_new, 0, -1);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ((*all)[i], (*alone)[0]) << "prompt " << i;
    EXPECT_EQ((*all)[i].size(), size_t(max_new));
  }
  // Cut after the first stop token: a prefix of the uncut row ending in it.
  const int32_t stop = (*all)[0][1];
  auto cut = t->generate({prompts[0]}, max_new, 0, stop);
  ASSERT_TRUE(cut.ok());
  const auto first = std::find((*all)[0].begin(), (*all)[0].end(), stop);
  EXPECT_EQ((*cut)[0], std::vector<int32_t>((*all)[0].begin(), first + 1));
  EXPECT_FALSE(t->generate({{}}, 2, 0).ok()) << "an empty prompt";
}

TEST(Trainer, DemoLearnsTheSyntheticTask) {
  // The README's demo job as shipped: loss must fall below half its start and
  // at least 80% of held-out prompts must be answered exactly.
  std::ifstream in(std::string(ZEROD_SOURCE_DIR) + "/examples/demo.json");
  std::stringstream ss;
  ss << in.rdbuf();
  auto cfg = parse_job_config(nlohmann::json::parse(ss.str()), 1);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto t = *testing::make_trainer(*cfg);
  double first = 0, last = 0;
  for (int64_t i = 0; i < cfg->run.steps; ++i) {
    auto s = *t->step();
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GE(*t->synthetic_accuracy(), 0.8);
}

// The demo's job as a Llama (its sizes, with llama-tiny's grouped-query
// heads, SwiGLU of 128 and untied head) for a third of the steps: the loss
// falls below 40% of its start (5.66 to 1.12 here) and some held-out
// prompts are answered (6.5% here; the whole 3000 steps reach 34.5% at a
// loss of 1.02, where GPT-2's demo passes 80%).
TEST(Trainer, ALlamaLearnsTheSyntheticTaskToo) {
  std::ifstream in(std::string(ZEROD_SOURCE_DIR) + "/examples/demo.json");
  const JobConfig cfg = testing::config_with(nlohmann::json::parse(in), {"model.preset=llama-tiny", "run.steps=1000",
                                                                         "scheduler.params.total_num_steps=1000"});
  ASSERT_TRUE(cfg.model.llama());
  auto t = *testing::make_trainer(cfg);
  double first = 0, last = 0;
  for (int64_t i = 0; i < cfg.run.steps; ++i) {
    auto s = *t->step();
    if (i == 0) first = s.loss;
    last = s.loss;
  }
  EXPECT_LT(last, 0.4 * first);
  EXPECT_GE(*t->synthetic_accuracy(), 0.03);
}

}  // namespace
}  // namespace zerod
