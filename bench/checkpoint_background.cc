// Checkpoints saved in the background: how long training waits for a save
// (Trainer's blocked_s: making the directory, copying the shard to the
// staging buffer, the polls and the commit) against a plain memcpy of the
// same byte count (the copy a snapshot cannot avoid) and against the same
// save in the foreground, all in the same run. Training goes on while the
// file is written; the step that overlaps the write is timed against one
// that does not (two cores here: the writer competes with the step).
//
// World of one, fp32 AdamW: the shard is the master weights, m and v (12
// bytes per parameter). The memcpy cycles through two 1 GiB buffers, both
// faulted in, as the staging buffer is after the first save (untimed).
// Rounds alternate the order of the foreground and background saves; the
// best of each is kept.
//
//   build/bench/checkpoint_background [dir=/tmp] [rounds=3] [presets=gpt2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/engine/trainer.h"

namespace {

using namespace zerod;
using bench::check;
using bench::checked;
using bench::seconds;

// Copies `bytes` from src to dst, both of the same size, cycling through them.
void copy_through(std::vector<char>& dst, const std::vector<char>& src, uint64_t bytes) {
  for (uint64_t at = 0; at < bytes;) {
    const uint64_t n = std::min<uint64_t>(src.size(), bytes - at);
    std::memcpy(dst.data(), src.data(), n);
    at += n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::vector<std::string> presets = absl::StrSplit(argc > 3 ? argv[3] : "gpt2", ',');
  std::printf("| model | shard bytes | memcpy s | background: training waited s | waited / memcpy | written after s "
              "| foreground save s | waited / foreground | step s | step during the write s |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& preset : presets) {
    std::unique_ptr<Trainer> t = checked(Trainer::create(bench::fp32_adamw_job(preset)));
    const std::string fg_root = dir + "/zerod-bench-fg", bg_root = dir + "/zerod-bench-bg";
    std::vector<char> src(size_t{1} << 30, 1), dst(size_t{1} << 30, 2);
    // Untimed: the first step, and a save that allocates the staging buffer.
    check(t->step().status());
    check(t->start_checkpoint(bg_root, 1, /*background=*/true));
    check(t->finish_checkpoint(/*wait=*/true).status());
    const uint64_t bytes = std::filesystem::file_size(checked(latest_checkpoint(bg_root)) + "/rank-00000.safetensors");
    double copy = 1e30, waited = 1e30, written = 1e30, fg = 1e30, step = 1e30, step_during = 1e30;
    const auto foreground = [&] { fg = std::min(fg, seconds([&] { check(t->save_checkpoint(fg_root, 1).status()); })); };
    const auto background = [&] {
      check(t->start_checkpoint(bg_root, 1, true));
      bool first = true;
      for (;;) {
        const double s = seconds([&] { check(t->step().status()); });
        if (first) step_during = std::min(step_during, s);
        first = false;
        const std::optional<SavedCheckpoint> saved = checked(t->finish_checkpoint(false));
        if (saved) {
          waited = std::min(waited, saved->blocked_s);
          written = std::min(written, saved->seconds);
          return;
        }
      }
    };
    for (int r = 0; r < rounds; ++r) {
      step = std::min(step, seconds([&] { check(t->step().status()); }));
      copy = std::min(copy, seconds([&] { copy_through(dst, src, bytes); }));
      bench::alternate(r, foreground, background);
    }
    check(t->finish_pruning());  // its thread may still be removing files under bg_root
    std::filesystem::remove_all(fg_root);
    std::filesystem::remove_all(bg_root);
    std::printf("| %s | %.2f GB | %.3f | %.3f | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f |\n", preset.c_str(),
                bytes / 1e9, copy, waited, waited / copy, written, fg, waited / fg, step, step_during);
    std::fflush(stdout);
  }
  return 0;
}
