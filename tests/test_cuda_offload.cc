// Offload on a real GPU (skipped without one): what test_gpu_tier_offload.cc
// shows on the CPU device standing in for a GPU, checked on CUDA.
//   - offload none, cpu and nvme, and stage 3's parameters on cpu or nvme,
//     give bitwise the GPU run without offload at stages 1-3, with clipping
//     (the update after the norm, or with super_offload during backward and
//     undone, the states in memory or on NVMe) and without (each unit
//     updated on the host during backward, its states in memory or streamed
//     from NVMe), each micro-batch's gradients summed on the GPU or, with
//     micro_batch_grads "compute", sent in bf16 against the GPU run that
//     rounds them the same way;
//   - pinned buffers start on a page (direct I/O uses them in place);
//   - a disk-full or EIO on the NVMe path during a GPU run fails the step
//     naming the file and the offset, and the checkpoint saved before it
//     resumes to the state it saved.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/cpu_device.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/memory.h"
#include "runtime/engine/trainer.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

class CudaOffloadTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
    auto d = open_device("cuda", 0, acct_);
    ASSERT_TRUE(d.ok()) << d.status();
    gpu_ = std::move(*d);
  }

  // The offload tests' job, on the GPU.
  JobConfig config(std::vector<std::string> overrides) const {
    overrides.insert(overrides.begin(), "run.device=\"cuda\"");
    return testing::offload_job(overrides);
  }
  std::vector<std::string> optimizer_on(const std::string& device) const {
    return testing::optimizer_on(device, dir_.string());
  }
  std::vector<std::string> params_on(const std::string& device) const {
    return testing::params_on(device, dir_.string());
  }

  MemoryAccountant acct_;
  std::unique_ptr<Device> gpu_;
};

using testing::joined;

// Direct I/O reads and writes the offload buffers in place: every pinned
// buffer starts on a page, small or not a whole number of pages, comes
// zeroed, and holds what is copied in and out of the GPU. They come from
// the host's device, as the states the GPU updates from the host do.
TEST_F(CudaOffloadTest, PinnedBuffersStartOnAPage) {
  CpuDevice host(acct_);
  std::vector<Buffer> held;
  for (uint64_t bytes : {16ull, 64ull, 4096ull, 241664ull, 241665ull, 3ull << 20}) {
    auto b = host.allocate(bytes, Category::kOffload, Tier::kPinned);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kPageBytes, 0u) << bytes << " bytes";
    std::vector<uint8_t> want(bytes), got(bytes);
    std::memcpy(got.data(), b->data(), bytes);
    EXPECT_EQ(got, std::vector<uint8_t>(bytes, 0)) << bytes << " bytes";
    for (uint64_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 7 + bytes);
    auto g = Buffer::allocate(bytes, Category::kOffload, Tier::kGpu, acct_);
    ASSERT_TRUE(g.ok()) << g.status();
    std::memcpy(b->data(), want.data(), bytes);
    copy_any(g->data(), b->data(), bytes);
    std::memset(b->data(), 0, bytes);
    copy_any(b->data(), g->data(), bytes);
    std::memcpy(got.data(), b->data(), bytes);
    EXPECT_EQ(got, want) << bytes << " bytes";
    held.push_back(std::move(*b));
  }
}

TEST_F(CudaOffloadTest, EveryOffloadGivesTheBitsOfTheGpuRunWithout) {
  // The third: fp16 from a scale that overflows at first, clipping some
  // steps. The last: each micro-batch's gradients rounded to bf16 (stages 2
  // and 3), sent so when offloaded, rounded in place without.
  const std::string compute = "zero_optimization.micro_batch_grads=\"compute\"";
  const std::vector<std::vector<std::string>> numerics = {
      {"gradient_clipping=1.0"},
      {"gradient_clipping=0"},
      {"gradient_clipping=3.0", "bf16.enabled=false", "fp16.enabled=true", "fp16.initial_scale_power=24",
       "fp16.hysteresis=1", "run.steps=6"},
      {"gradient_clipping=0", compute}};
  for (const std::vector<std::string>& numeric : numerics) {
    for (int stage : {1, 2, 3}) {
      if (stage == 1 && std::ranges::count(numeric, compute)) continue;
      const std::vector<std::string> base = joined({"zero_optimization.stage=" + std::to_string(stage)}, numeric);
      std::string numbers;
      for (const std::string& o : numeric) numbers += o + " ";
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", " << numbers);
      const testing::TrainedRun ref = testing::train_to_end(config(base), nullptr, *gpu_);
      ASSERT_TRUE(ref.status.ok()) << ref.status;
      std::vector<std::vector<std::string>> variants = {joined(base, optimizer_on("cpu")),
                                                        joined(base, optimizer_on("nvme"))};
      if (stage >= 2) {  // updated during backward, then undone where the step clips or overflows
        for (const char* device : {"cpu", "nvme"}) {
          variants.push_back(
              joined(joined(base, optimizer_on(device)), {"zero_optimization.offload_optimizer.super_offload=true"}));
        }
      }
      if (stage == 3) {
        variants.push_back(joined(base, params_on("cpu")));
        variants.push_back(joined(joined(base, params_on("cpu")), optimizer_on("cpu")));
        variants.push_back(joined(joined(base, params_on("nvme")), optimizer_on("nvme")));
      }
      for (const auto& v : variants) {
        std::string name;
        for (const auto& o : v) name += o + " ";
        SCOPED_TRACE(name);
        const testing::TrainedRun r = testing::train_to_end(config(v), nullptr, *gpu_);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_EQ(r.losses, ref.losses);
        EXPECT_TRUE(testing::same_bits(r.params, ref.params));
      }
    }
  }
}

TEST_F(CudaOffloadTest, AnNvmeFaultFailsTheGpuRunNamingFileAndOffsetAndTheCheckpointResumes) {
  struct Case {
    const char* what;
    std::vector<std::string> offload;
    const char* file;
    int error;  // returned for every write (ENOSPC) or read (EIO) once armed
    const char* message;
  };
  const Case cases[] = {
      // Stage 2 with the states on NVMe keeps the gradient shard there too:
      // its write during backward is the first to fail.
      {"gradients: disk full", joined({"zero_optimization.stage=2"}, optimizer_on("nvme")), "zerod-grads-rank00000",
       ENOSPC, "No space left on device"},
      {"params: EIO on read", joined({"zero_optimization.stage=3"}, params_on("nvme")), "zerod-params-rank00000", EIO,
       "Input/output error"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // Small requests and a short queue, so a pass takes many.
    const JobConfig cfg = config(joined(c.offload, {"run.steps=7", "aio.block_size=8192", "aio.queue_depth=3"}));
    const std::string root = path(std::string("ckpt-") + std::to_string(c.error));
    std::atomic<bool> armed{false};
    TrainerEnv env;
    env.io_faults.on_complete = [&](bool write, const std::string&, uint64_t, uint32_t, int r) {
      if (!armed || write != (c.error == ENOSPC)) return r;
      return -c.error;
    };
    std::vector<float> saved;
    {
      auto t = Trainer::create(cfg, nullptr, gpu_.get(), env);
      ASSERT_TRUE(t.ok()) << t.status();
      ASSERT_TRUE((*t)->step().ok());
      ASSERT_TRUE((*t)->save_checkpoint(root, 2).ok());
      saved = *(*t)->master_params();
      armed = true;
      // A write-back's failure is seen when the buffer is next waited for.
      absl::Status failed;
      for (int i = 0; i < 5 && failed.ok(); ++i) failed = (*t)->step().status();
      ASSERT_FALSE(failed.ok());
      const std::string m(failed.message());
      EXPECT_NE(m.find(c.file), std::string::npos) << m;
      EXPECT_NE(m.find("at offset"), std::string::npos) << m;
      EXPECT_NE(m.find(c.message), std::string::npos) << m;
      armed = false;
    }
    auto resumed = Trainer::create(cfg, nullptr, gpu_.get());
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    auto latest = latest_checkpoint(root);
    ASSERT_TRUE(latest.ok()) << latest.status();
    ASSERT_TRUE((*resumed)->resume(*latest).ok());
    EXPECT_TRUE(testing::same_bits(*(*resumed)->master_params(), saved));
  }
}

}  // namespace
}  // namespace zerod
