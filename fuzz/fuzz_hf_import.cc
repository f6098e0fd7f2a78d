// Hugging Face GPT-2 import: the input's first part (up to a NUL) is the
// config.json beside the weights (none when empty), the rest the
// model.safetensors, opened for a fixed small model and read whole.
#include "fuzz/fuzz_input.h"
#include "runtime/model/hf_gpt2.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The shape of the seeds in fuzz/corpus/fuzz_hf_import.
  static const zerod::GptLayout layout(
      zerod::GptConfig{.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 16, .block_size = 8});
  const auto parts = zerod::fuzz::split_at_nul(data, size, 2);
  const std::string config = zerod::fuzz::scratch_dir() + "/hf/config.json";
  std::filesystem::remove(config);
  if (parts.size() == 2 && !parts[0].empty()) zerod::fuzz::write_scratch("hf/config.json", parts[0]);
  const std::string path = zerod::fuzz::write_scratch("hf/model.safetensors", parts.back());
  absl::StatusOr<zerod::Gpt2Weights> w = zerod::Gpt2Weights::open(path, layout);
  if (!w.ok()) return 0;
  std::vector<float> params(layout.num_params());
  w->read(0, layout.num_params(), params.data()).IgnoreError();
  return 0;
}
