// The CPU Device: ordered streams, events between streams and the host,
// accounted allocation, the device registry, and the kernel table, which
// must compute what the cpu:: kernels it wraps compute, on threaded streams
// as on synchronous ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/core/caching_allocator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/gpt_layout.h"
#include "tests/float_compare.h"

namespace zerod {
namespace {

constexpr CpuDeviceOptions kThreaded{true, 200, 2, 42};

TEST(CpuDevice, SynchronousStreamsRunWorkAsItIsEnqueued) {
  CpuDevice dev;
  int x = 0;
  CpuDevice::launch(dev.compute_stream(), [&] { x = 5; });
  EXPECT_EQ(x, 5);
  std::vector<uint8_t> buf(64, 0);
  dev.memset(dev.compute_stream(), buf.data(), 0xab, 64);
  EXPECT_EQ(buf[63], 0xab);
}

TEST(CpuDevice, ThreadedStreamRunsItsWorkInOrder) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  std::vector<int> seen;
  for (int i = 0; i < 500; ++i) CpuDevice::launch(dev.compute_stream(), [&seen, i] { seen.push_back(i); });
  ASSERT_TRUE(dev.synchronize(dev.compute_stream()).ok());
  std::vector<int> want(500);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
}

TEST(CpuDevice, EventsOrderWorkAcrossStreamsBothWays) {
  // A producer stream writes one shared slot per round and a consumer
  // stream copies it out: `ready` keeps the consumer from reading early and
  // `drained` keeps the producer from overwriting what is not read yet.
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto consumer = dev.create_stream();
  auto ready = dev.create_event(), drained = dev.create_event();
  ASSERT_TRUE(consumer.ok() && ready.ok() && drained.ok());
  Stream& producer = dev.compute_stream();
  constexpr int kRounds = 200;
  std::vector<int32_t> src(kRounds), out(kRounds, -1);
  std::iota(src.begin(), src.end(), 1000);
  int32_t slot = 0;
  for (int i = 0; i < kRounds; ++i) {
    dev.wait(producer, **drained);
    dev.copy(producer, &slot, &src[i], 4);
    dev.record(producer, **ready);
    dev.wait(**consumer, **ready);
    dev.copy(**consumer, &out[i], &slot, 4);
    dev.record(**consumer, **drained);
  }
  ASSERT_TRUE(dev.synchronize(**drained).ok());
  EXPECT_EQ(out, src);
}

TEST(CpuDevice, SynchronizeOnAnEventWaitsForTheWorkBeforeIt) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto e = dev.create_event();
  ASSERT_TRUE(e.ok());
  // Never recorded: nothing to wait for.
  ASSERT_TRUE(dev.synchronize(**e).ok());
  std::vector<uint8_t> buf(1 << 16, 0);
  for (int round = 1; round <= 20; ++round) {
    dev.memset(dev.compute_stream(), buf.data(), round, buf.size());
    dev.record(dev.compute_stream(), **e);
    ASSERT_TRUE(dev.synchronize(**e).ok());
    EXPECT_EQ(buf.front(), round);
    EXPECT_EQ(buf.back(), round);
  }
}

TEST(CpuDevice, AllocatesAccountedHostMemoryOnly) {
  MemoryAccountant acct;
  CpuDevice dev(acct);
  EXPECT_EQ(dev.name(), "cpu");
  EXPECT_EQ(dev.memory_tier(), Tier::kHost);
  {
    auto b = dev.allocate(1000, Category::kActivations);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->tier(), Tier::kHost);
    EXPECT_EQ(acct.current(Tier::kHost, Category::kActivations), 1000u);
  }
  EXPECT_EQ(acct.current(Tier::kHost, Category::kActivations), 0u);
  // Pinned memory it hands out where CUDA pins it (CudaOffloadTest).
  for (Tier t : {Tier::kGpu, Tier::kNvme}) {
    auto b = dev.allocate(64, Category::kParams, t);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find(tier_name(t)), std::string::npos) << b.status();
  }
  EXPECT_EQ(acct.peak_total(Tier::kGpu), 0u);
}

// With device_only_memory the device's own buffers refuse host access as
// GPU memory does, while host staging it is asked for stays open.
TEST(CpuDeviceDeathTest, DeviceOnlyMemoryRefusesHostAccess) {
  CpuDeviceOptions options;
  options.device_only_memory = true;
  CpuDevice dev(MemoryAccountant::global(), options);
  EXPECT_FALSE(dev.host_visible());
  auto own = dev.allocate(64, Category::kParams);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_DEATH(own->host<char>(), "host access to a 64-byte params buffer in device-only memory");
  auto staging = dev.allocate(64, Category::kWorkspace, Tier::kHost);
  ASSERT_TRUE(staging.ok()) << staging.status();
  staging->host<char>()[0] = 1;
  EXPECT_TRUE(CpuDevice().host_visible());
}

// Standing in for a GPU, the device's memory is the gpu tier, held by a
// caching allocator under run.gpu_memory_limit and closed to host code; it
// knows its own addresses from host memory, which it still hands out for
// staging.
TEST(CpuDeviceDeathTest, StandingInForAGpuItsMemoryIsTheGpuTier) {
  CpuDeviceOptions options;
  options.gpu_tier = true;
  MemoryAccountant acct;
  acct.set_limit(Tier::kGpu, 4u << 20);
  CpuDevice dev(acct, options);
  EXPECT_EQ(dev.memory_tier(), Tier::kGpu);
  EXPECT_FALSE(dev.host_visible());
  auto own = dev.allocate(3u << 20, Category::kParams);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(acct.current(Tier::kGpu, Category::kParams), CachingAllocator::block_size(3u << 20));
  EXPECT_EQ(acct.current_total(Tier::kHost), 0u);
  EXPECT_TRUE(dev.holds(own->data()));
  EXPECT_TRUE(dev.holds(own->ptr<char>() + (3u << 20) - 1));
  EXPECT_DEATH(own->host<char>(), "device-only memory");
  auto over = dev.allocate(2u << 20, Category::kGrads);
  EXPECT_TRUE(absl::IsResourceExhausted(over.status())) << over.status();
  EXPECT_NE(over.status().message().find("gpu memory limit of 4194304"), std::string::npos) << over.status();
  auto staging = dev.allocate(64, Category::kComm, Tier::kHost);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_FALSE(dev.holds(staging->data()));
  staging->host<char>()[0] = 1;
  EXPECT_EQ(acct.current(Tier::kHost, Category::kComm), 64u);
  EXPECT_FALSE(CpuDevice().holds(staging->data()));
}

// Host code reads and writes the device's memory part by part, in order,
// each part but the last a multiple of 8 bytes; where the memory is not
// host-visible the parts are host staging of at most 4 MiB, accounted while
// they live; where it is, one part, the memory itself.
TEST(CpuDevice, HostReadsAndWritesReachDeviceOnlyMemoryThroughStaging) {
  const uint64_t bytes = (uint64_t{9} << 20) + 12;  // three parts
  for (bool device_only : {false, true}) {
    SCOPED_TRACE(device_only);
    MemoryAccountant acct;
    CpuDeviceOptions options = kThreaded;
    options.device_only_memory = device_only;
    CpuDevice dev(acct, options);
    auto b = dev.allocate(bytes, Category::kParams);
    ASSERT_TRUE(b.ok()) << b.status();
    std::vector<uint64_t> offsets;
    uint64_t peak_staging = 0;
    auto fill = [&](void* p, uint64_t offset, uint64_t n) {
      offsets.push_back(offset);
      EXPECT_EQ(p == b->data(), !device_only);
      peak_staging = std::max<uint64_t>(peak_staging, acct.current(Tier::kHost, Category::kWorkspace));
      for (uint64_t i = 0; i < n; ++i) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>((offset + i) * 7 % 251);
      return absl::OkStatus();
    };
    ASSERT_TRUE(dev.write_from_host(dev.compute_stream(), b->data(), bytes, fill).ok());
    const std::vector<uint64_t> want_offsets =
        device_only ? std::vector<uint64_t>{0, 4u << 20, 8u << 20} : std::vector<uint64_t>{0};
    EXPECT_EQ(offsets, want_offsets);
    EXPECT_EQ(peak_staging, device_only ? 4u << 20 : 0u);
    EXPECT_EQ(acct.current(Tier::kHost, Category::kWorkspace), 0u);
    // Written where it belongs, as the device's own copy sees it.
    std::vector<uint8_t> got(bytes);
    dev.copy(dev.compute_stream(), got.data(), b->data(), bytes);
    ASSERT_TRUE(dev.synchronize(dev.compute_stream()).ok());
    for (uint64_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], static_cast<uint8_t>(i * 7 % 251)) << i;
    // And read back in order, after work enqueued before on the stream.
    dev.memset(dev.compute_stream(), b->data(), 0x5a, 16);
    std::vector<uint8_t> seen;
    ASSERT_TRUE(dev.read_on_host(dev.compute_stream(), b->data(), bytes,
                                 [&](void* p, uint64_t offset, uint64_t n) {
                                   EXPECT_EQ(offset, seen.size());
                                   const auto* c = static_cast<const uint8_t*>(p);
                                   seen.insert(seen.end(), c, c + n);
                                   return absl::OkStatus();
                                 })
                    .ok());
    std::fill_n(got.begin(), 16, 0x5a);
    EXPECT_EQ(seen, got);
    // A failing part stops the transfer and is returned.
    int calls = 0;
    const absl::Status failed =
        dev.read_on_host(dev.compute_stream(), b->data(), bytes, [&](void*, uint64_t, uint64_t) {
          ++calls;
          return absl::DataLossError("stop");
        });
    EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(calls, 1);
  }
}
// "auto" is the GPU where there is one; "cuda" without one is refused naming
// why; local ranks past the visible GPUs share them round-robin.
TEST(DeviceRegistry, OpensWhatIsThereAndRefusesWhatIsNot) {
  auto cpu = open_device("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
  const int gpus = cuda_device_count();
  auto autod = open_device("auto");
  ASSERT_TRUE(autod.ok()) << autod.status();
  EXPECT_EQ((*autod)->name(), gpus > 0 ? "cuda:0" : "cpu");
  if (gpus == 0) {
    auto cuda = open_device("cuda");
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("run.device 'cuda'"), std::string::npos) << cuda.status();
  } else {
    auto cuda = open_device("cuda", gpus - 1);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ((*cuda)->name(), absl::StrCat("cuda:", gpus - 1));
    EXPECT_EQ((*cuda)->memory_tier(), Tier::kGpu);
    auto past = open_device("cuda", gpus);
    ASSERT_TRUE(past.ok()) << past.status();
    EXPECT_EQ((*past)->name(), "cuda:0");
    EXPECT_EQ(open_device("cuda", -1).status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto bad = open_device("tpu");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'tpu'"), std::string::npos) << bad.status();
}

// A device of GPU memory that is no CUDA device gets no table: kernels_for
// picks the table by the device's kind and names the device it refuses.
TEST(DeviceRegistry, ATableOnlyForADeviceOfAKnownKind) {
  class FakeGpu : public Device {
   public:
    FakeGpu() : Device(MemoryAccountant::global()), stream_(CpuDeviceOptions{}, 1) {}
    std::string name() const override { return "fake-gpu"; }
    Tier memory_tier() const override { return Tier::kGpu; }
    Stream& compute_stream() override { return stream_; }
    // Only its kind is asked for: it makes no streams or events of its own.
    absl::StatusOr<std::unique_ptr<Stream>> create_stream() override {
      return absl::FailedPreconditionError("fake-gpu has only its compute stream");
    }
    absl::StatusOr<std::unique_ptr<Event>> create_event() override {
      return absl::FailedPreconditionError("fake-gpu has no events");
    }
    absl::StatusOr<std::unique_ptr<Event>> create_timing_event() override { return create_event(); }
    absl::StatusOr<double> elapsed_ms(Event&, Event&) override {
      return absl::FailedPreconditionError("fake-gpu has no events");
    }
    void memset(Stream&, void*, int, uint64_t) override {}
    void copy_bytes(Stream&, void*, const void*, uint64_t) override {}
    void record(Stream&, Event&) override {}
    void wait(Stream&, Event&) override {}
    absl::Status host_wait(Stream&) override { return absl::OkStatus(); }
    absl::Status host_wait(Event&) override { return absl::OkStatus(); }

   private:
    CpuStream stream_;
  };
  FakeGpu fake;
  auto refused = kernels_for(fake);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fake-gpu"), std::string::npos) << refused.status();
  CpuDevice cpu;
  auto table = kernels_for(cpu);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->attention_row_stats(), 2);  // the CPU's max and reciprocal sum
}

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  NormalRng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.next());
  return v;
}

// Every op of the table on a threaded stream gives the bits of the cpu::
// kernel called directly (a swapped argument would not).
TEST(CpuKernelTable, EveryOpOnAThreadedStreamEqualsTheDirectCall) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto table = kernels_for(dev);
  ASSERT_TRUE(table.ok()) << table.status();
  Kernels& k = **table;
  Stream& s = dev.compute_stream();
  const int B = 2, T = 5, C = 8, NH = 2, V = 11, OC = 12;
  const int64_t N = B * T;
  const std::vector<float> x = random_floats(N * 3 * C, 1), w = random_floats(4 * C * OC, 2),
                           bias = random_floats(OC, 3), dout = random_floats(N * OC, 4);
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>((i * 7) % V), targets[i] = int32_t((i * 5) % V);

  // Each case fills `got` through the table and `want` directly.
  auto same = [&](const std::string& name, int64_t n, auto&& via_table, auto&& direct) {
    std::vector<float> got(n, 0.5f), want(n, 0.5f);
    via_table(got.data());
    ASSERT_TRUE(dev.synchronize(s).ok());
    direct(want.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0) << name;
  };
  same(
      "matmul_forward", N * OC, [&](float* o) { k.matmul_forward(s, o, x.data(), w.data(), bias.data(), N, C, OC); },
      [&](float* o) { cpu::matmul_forward(o, x.data(), w.data(), bias.data(), N, C, OC); });
  // dinp [N, C], then dw [C, OC], then dbias [OC], in one array.
  same(
      "matmul_backward", N * C + C * OC + OC,
      [&](float* o) {
        k.matmul_backward(s, o, o + N * C, o + N * C + C * OC, dout.data(), x.data(), w.data(), N, C, OC);
      },
      [&](float* o) {
        cpu::matmul_backward(o, o + N * C, o + N * C + C * OC, dout.data(), x.data(), w.data(), N, C, OC);
      });
  same(
      "layernorm_forward", N * C + 2 * N,
      [&](float* o) { k.layernorm_forward(s, o, o + N * C, o + N * C + N, x.data(), w.data(), bias.data(), N, C); },
      [&](float* o) { cpu::layernorm_forward(o, o + N * C, o + N * C + N, x.data(), w.data(), bias.data(), N, C); });
  same(
      "layernorm_backward", N * C + 2 * C,
      [&](float* o) {
        k.layernorm_backward(s, o, o + N * C, o + N * C + C, dout.data(), x.data(), w.data(), bias.data(),
                             bias.data() + 1, N, C);
      },
      [&](float* o) {
        cpu::layernorm_backward(o, o + N * C, o + N * C + C, dout.data(), x.data(), w.data(), bias.data(),
                                bias.data() + 1, N, C);
      });
  const int64_t stats = int64_t(B) * NH * T * 2;
  std::vector<float> scratch(k.attention_scratch_floats(B, T, C, NH));
  same(
      "attention_forward", N * C + stats,
      [&](float* o) { k.attention_forward(s, o, o + N * C, scratch.data(), x.data(), B, T, C, NH, NH); },
      [&](float* o) { cpu::attention_forward(o, o + N * C, scratch.data(), x.data(), B, T, C, NH, NH); });
  std::vector<float> row_stats(stats), fwd(N * C);
  cpu::attention_forward(fwd.data(), row_stats.data(), scratch.data(), x.data(), B, T, C, NH, NH);
  for (DType rounded : {DType::kF32, DType::kBF16}) {
    same(
        absl::StrCat("attention_backward, rounded to ", dtype_name(rounded)), N * 3 * C,
        [&](float* o) {
          k.attention_backward(s, o, dout.data(), x.data(), fwd.data(), row_stats.data(), scratch.data(), B, T, C, NH,
                               NH, rounded);
        },
        [&](float* o) {
          cpu::attention_backward(o, dout.data(), x.data(), row_stats.data(), scratch.data(), B, T, C, NH, NH, rounded);
        });
  }
  same(
      "gelu_forward", N * C, [&](float* o) { k.gelu_forward(s, o, x.data(), N * C); },
      [&](float* o) { cpu::gelu_forward(o, x.data(), N * C); });
  same(
      "gelu_backward", N * C, [&](float* o) { k.gelu_backward(s, o, x.data(), dout.data(), N * C); },
      [&](float* o) { cpu::gelu_backward(o, x.data(), dout.data(), N * C); });
  same(
      "residual_forward", N * C, [&](float* o) { k.residual_forward(s, o, x.data(), w.data(), N * C); },
      [&](float* o) { cpu::residual_forward(o, x.data(), w.data(), N * C); });
  same(
      "add", N * C,
      [&](float* o) {
        k.add(s, o, x.data(), N * C);
        k.add(s, o, w.data(), N * C);
      },
      [&](float* o) {
        for (int64_t i = 0; i < N * C; ++i) o[i] = (o[i] + x[i]) + w[i];
      });
  same(
      "embedding_forward", N * C,
      [&](float* o) { k.embedding_forward(s, o, tokens.data(), x.data(), w.data(), B, T, C); },
      [&](float* o) { cpu::embedding_forward(o, tokens.data(), x.data(), w.data(), B, T, C); });
  std::vector<int32_t> order(tokens.size());
  token_order(tokens.data(), N, order.data());
  same(
      "embedding_backward", V * C + T * C,
      [&](float* o) { k.embedding_backward(s, o, o + V * C, dout.data(), tokens.data(), order.data(), B, T, C); },
      [&](float* o) { cpu::embedding_backward(o, o + V * C, dout.data(), tokens.data(), B, T, C); });
  same(
      "classifier_logits", B * V,
      [&](float* o) { k.classifier_logits(s, o, x.data() + (T - 1) * C, T * C, w.data(), B, C, V); },
      [&](float* o) { cpu::classifier_logits(o, x.data() + (T - 1) * C, T * C, w.data(), B, C, V); });
  // losses (as doubles: 2 floats each), dinp, dwte and the logits scratch.
  same(
      "classifier_forward_backward", 2 * N + N * C + V * C + 3 * V,
      [&](float* o) {
        k.classifier_forward_backward(
            s, {x.data(), w.data(), targets.data(), N, C, V, 0.25f, DType::kBF16, o + 2 * N + N * C + V * C, 3,
                reinterpret_cast<double*>(o), o + 2 * N, o + 2 * N + N * C});
      },
      [&](float* o) {
        cpu::classifier_forward_backward({x.data(), w.data(), targets.data(), N, C, V, 0.25f, DType::kBF16,
                                          o + 2 * N + N * C + V * C, 3, reinterpret_cast<double*>(o), o + 2 * N,
                                          o + 2 * N + N * C});
      });
  for (DType t : {DType::kBF16, DType::kF16}) {
    same(
        "round_to", N * C,
        [&](float* o) {
          std::memcpy(o, x.data(), N * C * 4);
          k.round_to(s, t, o, N * C);
        },
        [&](float* o) {
          std::memcpy(o, x.data(), N * C * 4);
          round_to(t, o, N * C);
        });
    same(
        "convert to and from f32", N * C,
        [&](float* o) {
          std::vector<uint16_t> half(N * C);
          k.convert_from_f32(s, t, x.data(), half.data(), N * C);
          k.convert_to_f32(s, t, half.data(), o, N * C);
          ASSERT_TRUE(dev.synchronize(s).ok());  // before `half` goes
        },
        [&](float* o) {
          std::vector<uint16_t> half(N * C);
          convert_from_f32(t, x.data(), half.data(), N * C);
          convert_to_f32(t, half.data(), o, N * C);
        });
  }
  double sums[2] = {0, 0};
  std::vector<double> terms(x.begin(), x.end());
  k.sum(s, terms.data(), terms.size(), &sums[0]);
  k.sum_squares(s, x.data(), x.size(), &sums[1]);
  ASSERT_TRUE(dev.synchronize(s).ok());
  double in_order = 0;
  for (double t : terms) in_order += t;
  EXPECT_EQ(sums[0], in_order);
  EXPECT_EQ(sums[1], cpu::sum_squares(x.data(), x.size()));
}

// A host wait is a synchronize, on a stream or an event, counted with the
// time it took; what a stream waits for (wait) and recording are none.
TEST(CpuDevice, CountsTheHostsWaitsOnly) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto other = dev.create_stream();
  auto e = dev.create_event();
  ASSERT_TRUE(other.ok() && e.ok());
  const Device::HostWaits before = dev.host_waits();
  CpuDevice::launch(dev.compute_stream(), [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  dev.record(dev.compute_stream(), **e);
  dev.wait(**other, **e);
  EXPECT_EQ(dev.host_waits().count, before.count);
  ASSERT_TRUE(dev.synchronize(**other).ok());
  ASSERT_TRUE(dev.synchronize(**e).ok());
  const Device::HostWaits after = dev.host_waits();
  EXPECT_EQ(after.count, before.count + 2);
  // The first waited for most of the sleep (all of it, unless this thread
  // was held up between the launch and the wait).
  EXPECT_GE(after.seconds - before.seconds, 0.01);
}

// DeepSpeed's factor, written out: unscale by 1/loss_scale, and clip by
// clip / (norm + 1e-6) where that is below 1, norm being the unscaled
// root of the sum of squares.
float deepspeed_factor(double sumsq, double loss_scale, double clip) {
  const double norm = std::sqrt(sumsq) / loss_scale;
  const double clip_coef = clip / (norm + 1e-6);
  return static_cast<float>(clip > 0 && clip_coef < 1 ? clip_coef / loss_scale : 1 / loss_scale);
}

// The update factor from units' sums on a threaded stream: their total in
// order, and the factor of it; NaN (and an infinite total) where a sum
// overflowed.
TEST(CpuKernelTable, TheUpdateFactorIsTheUnscaledClippingOfTheUnitsSums) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto table = kernels_for(dev);
  ASSERT_TRUE(table.ok()) << table.status();
  Stream& s = dev.compute_stream();
  struct Case {
    std::vector<double> sums;
    double loss_scale, clip;
  };
  const std::vector<Case> cases = {
      {{0.25, 4.0, 1.5e3, 0.0}, 1024.0, 1.0},  // clipped: norm about 0.038 of the scaled 38.8
      {{0.25, 4.0, 1.5e3}, 1.0, 1.0},          // clipped, no loss scale
      {{1e-4, 2e-4}, 1.0, 1.0},                // below the clip: only unscaled
      {{0.25, 4.0, 1.5e3}, 65536.0, 0.0},      // no clipping
      {{1.0, INFINITY, 2.0}, 1024.0, 1.0},     // overflow
      {{1.0, NAN}, 1.0, 0.0}};
  for (const Case& c : cases) {
    float factor = -1;
    double sumsq = -1;
    (*table)->update_factor(s, c.sums.data(), static_cast<int>(c.sums.size()), c.loss_scale, c.clip, &factor, &sumsq);
    ASSERT_TRUE(dev.synchronize(s).ok());
    double total = 0;
    for (double x : c.sums) total += x;
    if (!std::isfinite(total)) {
      EXPECT_FALSE(std::isfinite(sumsq));
      EXPECT_TRUE(std::isnan(factor));
      continue;
    }
    EXPECT_EQ(sumsq, total);
    EXPECT_EQ(factor, deepspeed_factor(total, c.loss_scale, c.clip)) << c.loss_scale << " " << c.clip;
  }
}

// An update that reads its factor from memory when it runs is the update
// with that factor given, bit for bit; with a factor that is not finite
// it changes nothing: fp32 states with a 16-bit copy, and 8-bit states.
TEST(CpuKernelTable, AnUpdateReadsItsFactorWhenItRunsAndSkipsANonFiniteOne) {
  CpuDevice dev(MemoryAccountant::global(), kThreaded);
  auto table = kernels_for(dev);
  ASSERT_TRUE(table.ok()) << table.status();
  Kernels& k = **table;
  Stream& s = dev.compute_stream();
  using testing::bits;
  const int64_t n = 3 * kQuantBlock + 17;
  const std::vector<float> g = random_floats(n, 11), p0 = random_floats(n, 12);
  for (const float value : {0.37f, NAN, INFINITY}) {
    SCOPED_TRACE(value);
    float factor = -1;  // set on the stream, after the update is enqueued
    AdamStep given = make_adam_step(AdamHyper{0.9f, 0.95f, 1e-8f, 0.1f, true}, 1e-3f, 3, value, true);
    AdamStep read = given;
    read.grad_scale = 99.0f;
    read.grad_scale_at = &factor;
    std::vector<float> p = p0, m(n, 0.01f), v(n, 0.02f), pw = p0, mw = m, vw = v;
    std::vector<uint16_t> p16(n, 7), p16w(n, 7);
    std::vector<float> q = p0, qw = p0, am(quant_blocks(n)), av(quant_blocks(n)), amw, avw;
    std::vector<uint8_t> qm(n), qv(n), qmw, qvw;
    Adam8bitTensor eight{q.data(), qm.data(),   qv.data(), am.data(),    av.data(),
                         g.data(), DType::kF32, nullptr,   DType::kBF16, n};
    adam8bit_zero_states(eight);
    qmw = qm, qvw = qv, amw = am, avw = av;
    Adam8bitTensor eight_want{qw.data(), qmw.data(),  qvw.data(), amw.data(),   avw.data(),
                              g.data(),  DType::kF32, nullptr,    DType::kBF16, n};
    CpuDevice::launch(s, [&factor, value] { factor = value; });
    k.adam(s, AdamTensor{p.data(), m.data(), v.data(), g.data(), DType::kF32, p16.data(), DType::kBF16, n}, read);
    k.adam8bit(s, eight, read);
    ASSERT_TRUE(dev.synchronize(s).ok());
    if (std::isfinite(value)) {
      adam_update(AdamTensor{pw.data(), mw.data(), vw.data(), g.data(), DType::kF32, p16w.data(), DType::kBF16, n},
                  given);
      adam8bit_update(eight_want, given);
    }
    EXPECT_EQ(bits(p), bits(pw));
    EXPECT_EQ(bits(m), bits(mw));
    EXPECT_EQ(bits(v), bits(vw));
    EXPECT_EQ(p16, p16w);
    EXPECT_EQ(bits(q), bits(qw));
    EXPECT_EQ(qm, qmw);
    EXPECT_EQ(qv, qvw);
    EXPECT_EQ(bits(am), bits(amw));
    EXPECT_EQ(bits(av), bits(avw));
  }
}

}  // namespace
}  // namespace zerod
