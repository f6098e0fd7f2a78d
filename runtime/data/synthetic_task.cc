#include "runtime/data/synthetic_task.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"
#include "runtime/data/portable_random.h"

namespace zerod {
namespace {

// The synthetic stream's layout: segments of `segment` tokens, each starting
// with "\n" and holding whole lines of `line_len` tokens (a line longer than
// a segment gets one of its own). Calls at_line(position) for each of
// `lines` lines in order and returns the stream's length.
template <typename F>
size_t pack_lines(size_t line_len, size_t segment, int lines, F&& at_line) {
  size_t start = 0, size = 1;
  for (int i = 0; i < lines; ++i) {
    if (size > start + 1 && size + line_len > start + segment) {
      start = std::max(size, start + segment);
      size = start + 1;
    }
    at_line(size);
    size += line_len;
  }
  return std::max(size, start + segment);
}

// The synthetic task's operand and result widths.
int operand_width(int max_operand) { return static_cast<int>(std::to_string(std::max(0, max_operand)).size()); }
int sum_width(int max_operand) { return static_cast<int>(std::to_string(2 * std::max(0, max_operand)).size()); }

}  // namespace

SyntheticTask make_synthetic_task(uint64_t seed, int seq_len, int max_operand, int train_lines, int heldout_prompts) {
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a <= max_operand; ++a) {
    for (int b = 0; b <= max_operand; ++b) pairs.emplace_back(a, b);
  }

  // The first tenth of a seeded permutation is held out; the rest is training.
  std::mt19937_64 rng(seed);
  portable_shuffle(pairs.data(), pairs.size(), rng);
  const size_t num_heldout = std::min(pairs.size(), std::max<size_t>(1, pairs.size() / 10));

  const int wa = operand_width(max_operand), wc = sum_width(max_operand);
  auto prompt = [&](int a, int b) { return absl::StrFormat("%0*d+%0*d=", wa, a, wa, b); };
  auto answer = [&](int a, int b) { return absl::StrFormat("%0*d", wc, a + b); };

  SyntheticTask task;
  const size_t num_prompts = std::min(num_heldout, static_cast<size_t>(std::max(0, heldout_prompts)));
  for (size_t i = 0; i < num_prompts; ++i) {
    const auto [a, b] = pairs[i];
    task.heldout.emplace_back(prompt(a, b), answer(a, b));
  }
  const size_t num_train = pairs.size() - num_heldout;
  if (num_train == 0) return task;  // max_operand < 1: nothing is left to train on
  const size_t line_len = 2 * wa + wc + 3;
  const size_t segment = static_cast<size_t>(std::max(1, seq_len));
  // Padding and each segment's first token are "\n"; the lines go between.
  std::vector<uint16_t>& out = task.train_tokens;
  out.assign(pack_lines(line_len, segment, train_lines, [](size_t) {}), '\n');
  pack_lines(line_len, segment, train_lines, [&](size_t at) {
    const auto [a, b] = pairs[num_heldout + uniform_below(rng, num_train)];
    for (char c : prompt(a, b) + answer(a, b) + "\n") out[at++] = static_cast<unsigned char>(c);
  });
  return task;
}

int64_t synthetic_task_tokens(int seq_len, int max_operand, int train_lines) {
  if (max_operand < 1) return 0;
  const size_t line_len = 2 * operand_width(max_operand) + sum_width(max_operand) + 3;
  return static_cast<int64_t>(
      pack_lines(line_len, static_cast<size_t>(std::max(1, seq_len)), train_lines, [](size_t) {}));
}

}  // namespace zerod
