// Hugging Face Llama-family import: the input cut at NULs into config.json,
// an index (empty: none, the weights are model.safetensors) and the weights
// (w.safetensors, which the index may name); the config's shape, where it
// is a Llama small enough to hold, opens them and reads them whole.
#include <algorithm>

#include "fuzz/fuzz_input.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/hf_llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = zerod::fuzz::split_at_nul(data, size, 3);
  if (parts.size() != 3) return 0;
  const std::string dir = zerod::fuzz::scratch_dir() + "/llama";
  std::filesystem::remove_all(dir);
  zerod::fuzz::write_scratch("llama/config.json", parts[0]);
  if (parts[1].empty()) {
    zerod::fuzz::write_scratch("llama/model.safetensors", parts[2]);
  } else {
    zerod::fuzz::write_scratch("llama/model.safetensors.index.json", parts[1]);
    zerod::fuzz::write_scratch("llama/w.safetensors", parts[2]);
  }
  absl::StatusOr<zerod::GptConfig> c = zerod::read_hf_config(dir);
  if (!c.ok() || !c->llama() || zerod::gpt_param_count(*c) > (int64_t{1} << 20)) return 0;
  c->block_size = std::min(c->block_size, 64);
  const zerod::GptLayout layout(*c);
  absl::StatusOr<zerod::LlamaWeights> w = zerod::LlamaWeights::open(dir, layout);
  if (!w.ok()) return 0;
  std::vector<float> params(layout.num_params());
  w->read(0, layout.num_params(), params.data()).IgnoreError();
  return 0;
}
