// Checkpoint save and load throughput of one rank's shard (ZeroEngine::
// save_shard / load_shard: fp32 master weights, Adam's m and v, 12 bytes
// per parameter, fsynced) against a plain sequential write (8 MiB write()
// calls, then fsync) and read of the same byte count, on the same disk, in
// the same run. The plain passes walk through a 1 GiB buffer, so that they
// too copy from and to memory rather than a cache-resident block. The page cache is dropped for each file before it is
// read (posix_fadvise DONTNEED after fsync), so reads come from the disk. Engine and plain passes alternate round by
// round, and the best of each is kept: this shared disk drifts.
//
//   build/bench/checkpoint_throughput [dir=/tmp] [rounds=3] [presets=gpt2,gpt2-large]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "comm/communicator.h"
#include "runtime/core/cpu_device.h"
#include "runtime/engine/trainer.h"
#include "runtime/kernels/cpu_table.h"

namespace {

using namespace zerod;
using bench::check;
using bench::seconds;

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

constexpr size_t kChunk = 8 << 20;

void plain_write(const std::string& path, uint64_t bytes, const std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) check(absl::InternalError("cannot create " + path));
  for (uint64_t at = 0; at < bytes;) {
    const ssize_t n = ::write(fd, buf.data() + at % buf.size(), std::min<uint64_t>(kChunk, bytes - at));
    if (n <= 0) check(absl::InternalError("write failed on " + path));
    at += static_cast<uint64_t>(n);
  }
  if (::fsync(fd) != 0) check(absl::InternalError("fsync failed on " + path));
  ::close(fd);
}

void plain_read(const std::string& path, std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) check(absl::InternalError("cannot open " + path));
  for (uint64_t at = 0;;) {
    const ssize_t n = ::read(fd, buf.data() + at % buf.size(), kChunk);
    if (n <= 0) break;
    at += static_cast<uint64_t>(n);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::vector<std::string> presets = absl::StrSplit(argc > 3 ? argv[3] : "gpt2,gpt2-large", ',');
  std::unique_ptr<Communicator> comm = make_local_communicator();
  CpuDevice device;
  std::unique_ptr<Kernels> kernels = cpu_kernels();
  std::printf(
      "| model | params | checkpoint bytes | save GB/s | plain write GB/s | save ratio | load GB/s | plain read "
      "GB/s | load ratio |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& preset : presets) {
    const JobConfig cfg = bench::fp32_adamw_job(preset);
    const GptLayout layout(cfg.model);
    absl::StatusOr<ZeroSettings> settings = zero_settings(cfg, layout);
    check(settings.status());
    absl::StatusOr<std::unique_ptr<ZeroEngine>> engine = ZeroEngine::create(layout, *settings, *comm, device, *kernels);
    check(engine.status());
    const std::string shard = dir + "/zerod-bench-shard.safetensors", plain = dir + "/zerod-bench-plain.bin";
    std::vector<char> buf(size_t{1} << 30, 1);  // a multiple of kChunk
    double save = 1e30, load = 1e30, write = 1e30, read = 1e30;
    uint64_t bytes = 0;
    // Not timed: the first save of a process runs 3-4x slower here (the
    // first pass over the engine's state).
    check((*engine)->save_shard(shard).status());
    plain_write(plain, std::filesystem::file_size(shard), buf);
    bytes = std::filesystem::file_size(shard);
    // Each save and each plain write makes a new file, as a checkpoint does
    // (the old one is removed untimed).
    const auto engine_pass = [&] {
      std::filesystem::remove(shard);
      save = std::min(save, seconds([&] { check((*engine)->save_shard(shard).status()); }));
      drop_cache(shard);
      load = std::min(load, seconds([&] { check((*engine)->load_shard(shard)); }));
    };
    const auto plain_pass = [&] {
      std::filesystem::remove(plain);
      write = std::min(write, seconds([&] { plain_write(plain, bytes, buf); }));
      drop_cache(plain);
      read = std::min(read, seconds([&] { plain_read(plain, buf); }));
    };
    for (int r = 0; r < rounds; ++r) bench::alternate(r, engine_pass, plain_pass);
    std::filesystem::remove(shard);
    std::filesystem::remove(plain);
    const double gb = bytes / 1e9;
    std::printf("| %s | %lld | %.2f GB | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", preset.c_str(),
                static_cast<long long>(layout.num_params()), gb, gb / save, gb / write, write / save, gb / load,
                gb / read, read / load);
    std::fflush(stdout);
  }
  return 0;
}
