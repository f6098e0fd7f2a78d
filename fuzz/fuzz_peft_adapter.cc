// PEFT adapter import (model.lora.init_from): the input's first part (up to
// a NUL) is the adapter_config.json, the rest the adapter_model.safetensors
// beside it, opened for a fixed small adapter layout and read whole.
#include "fuzz/fuzz_input.h"
#include "runtime/model/peft_adapter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The shape of the seeds in fuzz/corpus/fuzz_peft_adapter: r 2 on c_attn and mlp.c_proj.
  static const zerod::LoraConfig lora = [] {
    zerod::LoraConfig c;
    c.r = 2;
    c.alpha = 4;
    c.targets = {true, false, false, true};
    return c;
  }();
  static const zerod::GptLayout layout = zerod::GptLayout::adapters(
      zerod::GptConfig{.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 256, .block_size = 8}, lora);
  const auto parts = zerod::fuzz::split_at_nul(data, size, 2);
  const std::string dir = zerod::fuzz::scratch_dir() + "/peft";
  std::filesystem::remove(dir + "/adapter_config.json");
  if (parts.size() == 2) zerod::fuzz::write_scratch("peft/adapter_config.json", parts[0]);
  zerod::fuzz::write_scratch("peft/adapter_model.safetensors", parts.back());
  absl::StatusOr<zerod::PeftAdapter> a = zerod::PeftAdapter::open(dir, layout);
  if (!a.ok()) return 0;
  std::vector<float> params(layout.num_params());
  a->read(0, layout.num_params(), params.data()).IgnoreError();
  return 0;
}
