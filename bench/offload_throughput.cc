// The offload engine on this machine's disk, in one run:
//
// 1. Sequential direct I/O through AioEngine against fio (from Debian) doing
//    the same: one file, the same block size and queue depth, io_uring,
//    O_DIRECT. Best of three passes each, in GB/s.
// 2. The optimizer step with its states streamed through a file
//    (SwappedOptimizer, bf16 parameters: fp32 master, m and v on the file)
//    against the same step in memory, and against the I/O alone (reading and
//    writing the file once, nothing computed). A swapped step as fast as the
//    I/O alone hides the compute entirely; one as slow as both added hides
//    nothing.
//
// A shared disk drifts: measurements alternate, round after round, and the
// best of each is kept.
//
//   build/bench/offload_throughput [dir=/tmp] [MiB=1024] [block_size=1048576] [queue_depth=8] [Mparams=32] [rounds=5]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "offload/swapped_optimizer.h"
#include "runtime/core/cpu_device.h"
#include "runtime/kernels/cpu_table.h"

namespace {

using namespace zerod;
using bench::check;
using bench::seconds;

// fio's bandwidth in bytes/s for one direct sequential pass.
double fio_bytes_per_s(const std::string& file, const char* rw, uint64_t bytes, int64_t block, int depth) {
  const std::string cmd = "fio --name=bench --filename=" + file + " --rw=" + rw + " --bs=" + std::to_string(block) +
                          " --iodepth=" + std::to_string(depth) + " --size=" + std::to_string(bytes) +
                          " --ioengine=io_uring --direct=1 --output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) return 0;
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return 0;
  return j["jobs"][0][std::string(rw) == "write" ? "write" : "read"]["bw_bytes"].get<double>();
}

void disk_vs_fio(const std::string& dir, uint64_t bytes, int64_t block, int depth, int rounds) {
  auto e = AioEngine::create({block, depth});
  check(e.status());
  auto f = (*e)->create_scratch(dir + "/zerod-bench.swap", bytes);
  check(f.status());
  auto buf = Buffer::allocate(bytes, Category::kOffload);
  check(buf.status());
  std::memset(buf->data(), 0x5a, bytes);
  AioEngine& io = **e;
  // Rounds alternate between the engine and fio, so both see the same
  // drift of a shared disk; the best of each is kept.
  const std::string fio_file = dir + "/zerod-bench-fio.bin";
  double w = 0, r = 0, fw = 0, fr = 0;
  for (int i = 0; i < rounds; ++i) {
    w = std::max(w, bytes / seconds([&] { check(io.wait(io.write(*f, 0, buf->data(), bytes))); }));
    fw = std::max(fw, fio_bytes_per_s(fio_file, "write", bytes, block, depth));
    r = std::max(r, bytes / seconds([&] { check(io.wait(io.read(*f, 0, buf->data(), bytes))); }));
    fr = std::max(fr, fio_bytes_per_s(fio_file, "read", bytes, block, depth));
  }
  ::unlink(fio_file.c_str());
  std::printf("sequential direct I/O, %llu MiB, block %lld, queue depth %d (%s), best of %d alternating rounds\n",
              static_cast<unsigned long long>(bytes >> 20), static_cast<long long>(block), depth,
              (*e)->direct(*f) ? "O_DIRECT" : "buffered", rounds);
  std::printf("| op | engine GB/s | fio GB/s | ratio |\n| --- | --- | --- | --- |\n");
  std::printf("| write | %.3f | %.3f | %.0f%% |\n", w / 1e9, fw / 1e9, fw > 0 ? 100 * w / fw : 0);
  std::printf("| read | %.3f | %.3f | %.0f%% |\n", r / 1e9, fr / 1e9, fr > 0 ? 100 * r / fr : 0);
}

void step_vs_memory(const std::string& dir, int64_t n, int64_t block, int depth, int rounds) {
  // One piece per 4M elements, as a model's tensors would be.
  const int64_t piece = 4 << 20;
  std::vector<float> master(n, 0.01f), grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = 1e-3f * static_cast<float>((i * 7919) % 2001 - 1000) / 1000;
  std::vector<uint16_t> p16(n);
  std::vector<ParamPiece> pieces;
  for (int64_t o = 0; o < n; o += piece) {
    const int64_t k = std::min(piece, n - o);
    pieces.push_back({master.data() + o, grad.data() + o, p16.data() + o, k, k, true});
  }
  OptimizerConfig cfg;
  CpuDevice host;
  std::unique_ptr<Kernels> kernels = cpu_kernels();
  auto mem = Optimizer::create(cfg, pieces, DType::kBF16, host);
  check(mem.status());

  std::printf(
      "\noptimizer step, %lld M params, bf16 parameters (fp32 master, m, v: 12 bytes each on the file), "
      "best of %d alternating rounds\n",
      static_cast<long long>(n >> 20), rounds);
  std::printf("| sub_group_size | buffers | in memory s | swapped s | I/O alone s | swapped / I/O alone |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [sub, nbuf] : {std::pair<int64_t, int>{n / 8, 4}, {n / 8, 2}, {n / 8, 1}, {n / 32, 4}}) {
    SwapSettings s{dir + "/zerod-bench-opt.swap", sub, nbuf, Tier::kHost, {block, depth}, {}};
    auto init = [&](int k, int64_t start, int64_t len, float* dst) {
      std::memcpy(dst, pieces[k].master + start, len * 4);
      return absl::OkStatus();
    };
    auto sw = SwappedOptimizer::create(cfg, pieces, DType::kBF16, init, s, host, *kernels);
    check(sw.status());
    // The same bytes read and written with nothing to compute, as one
    // transfer each way.
    const uint64_t bytes = (*sw)->file_bytes();
    auto e = AioEngine::create({block, depth});
    check(e.status());
    auto f = (*e)->create_scratch(dir + "/zerod-bench-io.swap", bytes);
    check(f.status());
    auto buf = Buffer::allocate(bytes, Category::kOffload);
    check(buf.status());
    std::memset(buf->data(), 0, bytes);
    AioEngine& io = **e;
    double t_mem = 1e30, t_swap = 1e30, t_io = 1e30;
    for (int i = 0; i < rounds; ++i) {
      t_mem = std::min(t_mem, seconds([&] {
                         (*mem)->step(*kernels, host.compute_stream(), 1e-3f, 1, 1.0f);
                         check(host.synchronize(host.compute_stream()));
                       }));
      t_swap = std::min(t_swap, seconds([&] { check((*sw)->step(1e-3f, 1, 1.0f)); }));
      t_io = std::min(t_io, seconds([&] {
                        check(io.wait(io.read(*f, 0, buf->data(), bytes)));
                        check(io.wait(io.write(*f, 0, buf->data(), bytes)));
                      }));
    }
    std::printf("| %lld | %d | %.3f | %.3f | %.3f | %.2f |\n", static_cast<long long>(sub), nbuf, t_mem, t_swap, t_io,
                t_swap / t_io);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const uint64_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024;
  const int64_t block = argc > 3 ? std::strtoll(argv[3], nullptr, 10) : 1048576;
  const int depth = argc > 4 ? std::atoi(argv[4]) : 8;
  const int64_t mparams = argc > 5 ? std::strtoll(argv[5], nullptr, 10) : 32;
  const int rounds = argc > 6 ? std::atoi(argv[6]) : 5;
  disk_vs_fio(dir, mib << 20, block, depth, rounds);
  step_vs_memory(dir, mparams << 20, block, depth, rounds);
  return 0;
}
