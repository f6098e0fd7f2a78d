// The built-in synthetic task the demo learns without a download.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zerod {

// The synthetic task: lines "a+b=c\n" with operands in [0, max_operand],
// zero-padded to fixed widths ("07+25=032\n"), as byte tokens. The stream is
// cut into segments of seq_len tokens that each begin with "\n" and hold
// whole lines (the rest is "\n" padding), so every training window starts at
// a line and each digit has a fixed position, as in the held-out prompts
// ("\n07+25=" at position 0). A seeded tenth of the operand pairs is held
// out: it never appears in the training stream and scores the model.
struct SyntheticTask {
  std::vector<uint16_t> train_tokens;
  std::vector<std::pair<std::string, std::string>> heldout;  // ("07+25=", "032")
};
SyntheticTask make_synthetic_task(uint64_t seed, int seq_len, int max_operand = 99, int train_lines = 100000,
                                  int heldout_prompts = 200);
// The length of make_synthetic_task's training stream, without making it.
int64_t synthetic_task_tokens(int seq_len, int max_operand = 99, int train_lines = 100000);

}  // namespace zerod
