// The wall_clock_breakdown: device spans timed by the stream's own events,
// host spans by the calling thread, each kernel of the table counted as
// often as the model calls it, copies named by direction with their bytes,
// the host optimizer's and the parameter store's time, and the run's
// numbers unchanged by timing them.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/core/cpu_device.h"
#include "runtime/core/profiler.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/profiled_kernels.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using Ms = std::chrono::milliseconds;

CpuDeviceOptions threaded(bool gpu_tier) {
  CpuDeviceOptions o;
  o.threaded = true;
  o.gpu_tier = gpu_tier;
  return o;
}

// The losses of n steps of `t` (those before the first failure).
std::vector<double> losses_of_steps(Trainer& t, int n) {
  std::vector<double> losses;
  for (int i = 0; i < n; ++i) {
    auto r = t.step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) break;
    losses.push_back(r->loss);
  }
  return losses;
}

TEST(Profiler, ADeviceSpanTimesItsStreamsWorkNotTheHostsEnqueueing) {
  CpuDevice device(MemoryAccountant::global(), threaded(false));
  Profiler p(device);
  Stream& s = device.compute_stream();
  // The stream's work waits for the host, which lets it go 40 ms after the
  // span closed and the work began (so after the span's start, however
  // late the stream gets to it): the span's time is the stream's, not the
  // enqueueing's.
  std::promise<void> go, began;
  std::shared_future<void> released = go.get_future().share();
  {
    auto span = Profiler::device_span(&p, s, "sleep", 123);
    CpuDevice::launch(s, [released, &began] {
      began.set_value();
      released.wait();
    });
  }
  began.get_future().wait();
  std::this_thread::sleep_for(Ms(40));
  go.set_value();
  {
    auto span = Profiler::host_span(&p, "host sleep", 7);
    std::this_thread::sleep_for(Ms(20));
  }
  ASSERT_TRUE(p.collect().ok());
  const Profiler::Totals dev = p.device_totals(), host = p.host_totals();
  ASSERT_EQ(dev.size(), 1u);
  EXPECT_GE(dev.at("sleep").ms, 40.0);
  EXPECT_EQ(dev.at("sleep").count, 1);
  EXPECT_EQ(dev.at("sleep").bytes, 123u);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_GE(host.at("host sleep").ms, 20.0);
  EXPECT_EQ(host.at("host sleep").bytes, 7u);
  // Spans add up by name; reset forgets them.
  for (int i = 0; i < 3; ++i) auto span = Profiler::device_span(&p, s, "sleep", 1);
  ASSERT_TRUE(p.collect().ok());
  EXPECT_EQ(p.device_totals().at("sleep").count, 4);
  EXPECT_EQ(p.device_totals().at("sleep").bytes, 126u);
  p.reset();
  EXPECT_TRUE(p.device_totals().empty());
  EXPECT_TRUE(p.host_totals().empty());
  // A span open at a collect is dropped, and its end changes nothing.
  {
    auto open = Profiler::device_span(&p, s, "open");
    ASSERT_TRUE(p.collect().ok());
  }
  ASSERT_TRUE(p.collect().ok());
  EXPECT_TRUE(p.device_totals().empty());
  // Without a profiler a span is nothing.
  auto none = Profiler::device_span(nullptr, s, "x");
  auto none_host = Profiler::host_span(nullptr, "x");
}

TEST(Profiler, ElapsedTimeNeedsBothEventsReached) {
  CpuDevice device(MemoryAccountant::global(), threaded(false));
  auto a = device.create_timing_event(), b = device.create_timing_event();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(device.elapsed_ms(**a, **b).ok());  // never recorded
  Stream& s = device.compute_stream();
  device.record(s, **a);
  CpuDevice::launch(s, [] { std::this_thread::sleep_for(Ms(10)); });
  device.record(s, **b);
  ASSERT_TRUE(device.synchronize(**b).ok());
  auto ms = device.elapsed_ms(**a, **b);
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 10.0);
}

// The model's calls per step, counted from its structure (L layers, a
// micro-batches): each layer's four matmuls (the MLP's first with its GELU
// after it, its second's backward through that GELU), two LayerNorms (and
// the final one), one attention; one classifier and embedding.
TEST(Profiler, EachKernelIsCountedAsOftenAsTheModelCallsItAndTheLossesAreUnchanged) {
  const int L = 2, a = 2;
  for (bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "activation checkpointing" : "no checkpointing");
    const std::vector<std::string> base = {
        "gradient_accumulation_steps=2", "run.steps=2",
        std::string("activation_checkpointing.enabled=") + (checkpointing ? "true" : "false")};
    MemoryAccountant acct;
    CpuDevice device(acct);
    const testing::TrainedRun plain =
        testing::train_to_end(testing::config_with(testing::tiny_job(), base), nullptr, device);
    ASSERT_TRUE(plain.status.ok()) << plain.status;
    const JobConfig cfg =
        testing::config_with(testing::tiny_job(), testing::joined(base, {"wall_clock_breakdown=true"}));
    auto t = Trainer::create(cfg, nullptr, &device);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_NE((*t)->profiler(), nullptr);
    EXPECT_EQ(losses_of_steps(**t, cfg.run.steps), plain.losses);
    auto params = (*t)->master_params();
    ASSERT_TRUE(params.ok());
    EXPECT_EQ(*params, plain.params);
    const Profiler::Totals dev = (*t)->profiler()->device_totals();
    const int steps = cfg.run.steps, forwards = checkpointing ? 2 : 1;
    // Recomputing a block for its backward skips its last product, whose
    // output the backward does not need.
    EXPECT_EQ(dev.at("matmul_forward").count, steps * a * L * (checkpointing ? 3 + 2 : 3));
    EXPECT_EQ(dev.at("matmul_gelu_forward").count, steps * a * L * forwards);
    EXPECT_EQ(dev.at("matmul_backward").count, steps * a * 3 * L);
    EXPECT_EQ(dev.at("matmul_backward_gelu").count, steps * a * L);
    EXPECT_EQ(dev.count("gelu_forward"), 0u);
    EXPECT_EQ(dev.count("gelu_backward"), 0u);
    EXPECT_EQ(dev.at("attention_forward").count, steps * a * L * forwards);
    EXPECT_EQ(dev.at("attention_backward").count, steps * a * L);
    EXPECT_EQ(dev.at("classifier_forward_backward").count, steps * a);
    EXPECT_EQ(dev.at("embedding_forward").count, steps * a);
    EXPECT_EQ(dev.at("embedding_backward").count, steps * a);
    EXPECT_EQ((*t)->profiler()->host_totals().at("step").count, steps);
    for (const auto& [name, total] : dev) {
      EXPECT_GE(total.ms, 0.0) << name;
      EXPECT_EQ(total.launches, 0) << name;
    }
  }
}

// A memory-bound op counts the bytes of its operands and results (an
// accumulated result twice: read and written), so that the breakdown
// gives its rate; a product counts none. On the CPU's table, operands are
// fp32.
TEST(Profiler, MemoryBoundOpsCountTheBytesOfWhatTheyReadAndWrite) {
  MemoryAccountant acct;
  CpuDevice device(acct);
  Profiler p(device);
  auto inner = kernels_for(device);
  ASSERT_TRUE(inner.ok()) << inner.status();
  std::unique_ptr<Kernels> k = profiled_kernels(std::move(*inner), p);
  Stream& s = device.compute_stream();
  const int64_t N = 6;
  const int C = 16, F = 24;
  auto bytes = [](std::initializer_list<const std::vector<float>*> vs) {
    uint64_t b = 0;
    for (const std::vector<float>* v : vs) b += v->size() * sizeof(float);
    return b;
  };
  std::vector<float> x(N * C, 0.5f), w(C, 1.0f), y(N * C), rstd(N), dy(N * C, 0.25f), dx(N * C), dw(C);
  k->rmsnorm_forward(s, y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  k->rmsnorm_backward(s, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  k->rmsnorm_backward(s, dx.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(), N, C);  // w frozen
  std::vector<float> gate_up(N * 2 * F, 0.5f), act(N * F), dact(N * F, 0.25f), dgate_up(N * 2 * F);
  k->swiglu_forward(s, act.data(), gate_up.data(), N, F);
  k->swiglu_backward(s, dgate_up.data(), gate_up.data(), dact.data(), N, F);
  const RopeShape rope{3, 4, 2, 4};  // two sequences of 3, 4 query heads over 2, width 4
  std::vector<float> qkv(N * rope.width(), 0.5f), table(rope.T * rope.hd, 0.5f);
  k->rope_forward(s, qkv.data(), table.data(), rope, N);
  k->residual_forward(s, y.data(), x.data(), dy.data(), N * C);
  k->matmul_forward(s, y.data(), x.data(), w.data(), nullptr, 1, C, 1);
  ASSERT_TRUE(device.synchronize(s).ok());
  ASSERT_TRUE(p.collect().ok());
  const Profiler::Totals dev = p.device_totals();
  EXPECT_EQ(dev.at("rmsnorm_forward").bytes, bytes({&x, &w, &y, &rstd}));
  // dx accumulated; dw too, where there is one.
  EXPECT_EQ(dev.at("rmsnorm_backward").bytes,
            bytes({&dy, &x, &w, &rstd, &dx, &dx, &dw, &dw}) + bytes({&dy, &x, &w, &rstd, &dx, &dx}));
  EXPECT_EQ(dev.at("swiglu_forward").bytes, bytes({&gate_up, &act}));
  EXPECT_EQ(dev.at("swiglu_backward").bytes, bytes({&gate_up, &dact, &dgate_up}));
  // q and k (4 + 2 heads of the 4 + 2 x 2 a row) read and written, and the table.
  EXPECT_EQ(dev.at("rope_forward").bytes, 2 * uint64_t(N) * 6 * 4 * sizeof(float) + bytes({&table}));
  EXPECT_EQ(dev.at("residual_forward").bytes, bytes({&x, &dy, &y}));
  EXPECT_EQ(dev.at("matmul_forward").bytes, 0u);
}

// A kernel table's launches add up under the op's name until a reset (the
// CUDA table counts its own; the CPU's makes none, so the run above has
// none).
TEST(Profiler, LaunchesAddUpByNameUntilReset) {
  MemoryAccountant acct;
  CpuDevice device(acct);
  Profiler p(device);
  p.add_launches("matmul_forward", 3);
  p.add_launches("matmul_forward", 2);
  p.add_launches("sum", 1);
  const Profiler::Totals dev = p.device_totals();
  EXPECT_EQ(dev.at("matmul_forward").launches, 5);
  EXPECT_EQ(dev.at("sum").launches, 1);
  EXPECT_EQ(dev.at("sum").count, 0) << "launches are not calls";
  p.reset();
  EXPECT_TRUE(p.device_totals().empty());
}

class ProfilerOffloadTest : public testing::TempDirTest {};

// On the CPU standing in for a GPU: the gradients go down to the host and
// the parameters up, the host optimizer and (stage 3, parameters offloaded)
// the parameter store are timed, and the bits are those of the untimed run.
TEST_F(ProfilerOffloadTest, CopiesAreNamedByDirectionAndTheHostsWorkIsTimed) {
  const std::vector<std::string> base = testing::joined(
      {"zero_optimization.stage=3"},
      testing::joined(testing::optimizer_on("cpu", dir_.string()), testing::params_on("cpu", dir_.string())));
  MemoryAccountant ref_acct;
  CpuDevice ref_device(ref_acct, threaded(true));
  const testing::TrainedRun ref = testing::train_to_end(testing::offload_job(base), nullptr, ref_device);
  ASSERT_TRUE(ref.status.ok()) << ref.status;

  MemoryAccountant acct;
  CpuDevice device(acct, threaded(true));
  const JobConfig cfg = testing::offload_job(testing::joined(base, {"wall_clock_breakdown=true"}));
  auto t = Trainer::create(cfg, nullptr, &device);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(losses_of_steps(**t, cfg.run.steps), ref.losses);
  const Profiler::Totals dev = (*t)->profiler()->device_totals(), host = (*t)->profiler()->host_totals();
  for (const char* name : {"copy device->host", "copy host->device"}) {
    ASSERT_TRUE(dev.count(name)) << name;
    EXPECT_GT(dev.at(name).bytes, 0u) << name;
    EXPECT_GT(dev.at(name).count, 0) << name;
  }
  for (const char* name : {"host optimizer", "parameter shard from its store (host or NVMe)"}) {
    ASSERT_TRUE(host.count(name)) << name;
    EXPECT_GT(host.at(name).count, 0) << name;
  }
  // The trainer is gone: the device it was given times nothing more.
  t->reset();
  EXPECT_EQ(device.profiler(), nullptr);
}

TEST(Profiler, TheWorkerReportsTheBreakdownAndRefusesANonBoolean) {
  const testing::WorkerResult on =
      testing::run_worker_with({"--config", ZEROD_SOURCE_DIR "/examples/demo.json", "--set", "run.steps=3", "--set",
                                "wall_clock_breakdown=true", "--log-format", "json"});
  ASSERT_EQ(on.code, 0) << on.err;
  nlohmann::json breakdown;
  for (const nlohmann::json& e : testing::events(on.out)) {
    if (e["event"] == "breakdown") breakdown = e;
  }
  ASSERT_FALSE(breakdown.is_null()) << on.out;
  EXPECT_EQ(breakdown["steps"], 2);
  EXPECT_EQ(breakdown["after_first"], true);
  EXPECT_GT(breakdown["step_ms"].get<double>(), 0.0);
  EXPECT_GE(breakdown["step_ms"].get<double>() + 1e-9,
            breakdown["kernels_ms"].get<double>() + breakdown["idle_ms"].get<double>() - 1e-6);
  EXPECT_EQ(breakdown["device"]["classifier_forward_backward"]["count"], 1.0);

  const testing::WorkerResult bad = testing::run_worker_with(
      {"--config", ZEROD_SOURCE_DIR "/examples/demo.json", "--set", "wall_clock_breakdown=\"yes\""});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("wall_clock_breakdown"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace zerod
