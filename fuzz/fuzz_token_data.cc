// Training data files: an llm.c token shard (16- or 32-bit ids), a windowed
// shard (instruction examples with their loss mask, packed or not) or plain text, as
// load_dataset reads them, and a loader's first batch of what loads. The
// first byte picks the kind and vocabulary, the second the window; the rest
// is the file.
#include "fuzz/fuzz_input.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  zerod::DataConfig cfg;
  cfg.kind = data[0] & 1 ? zerod::DataKind::kText : zerod::DataKind::kTokens;
  cfg.seq_len = 1 + data[1];
  cfg.path = zerod::fuzz::write_scratch("data.bin", {reinterpret_cast<const char*>(data) + 2, size - 2});
  absl::StatusOr<zerod::Dataset> ds = zerod::load_dataset(cfg, data[0] & 2 ? 256 : 50257);
  if (!ds.ok()) return 0;
  absl::StatusOr<zerod::DataLoader> loader = zerod::DataLoader::create(
      &ds->tokens, cfg.seq_len, 1, 0, 1, zerod::MemoryAccountant::global(), ds->windowed, ds->packed);
  if (!loader.ok()) return 0;
  std::vector<int32_t> inputs(cfg.seq_len), targets(cfg.seq_len), positions(cfg.seq_len);
  const int64_t counted = loader->next_batch(1, inputs.data(), targets.data(), positions.data());
  if (counted < 0 || counted > cfg.seq_len) __builtin_trap();
  for (int t = 0; t < cfg.seq_len; ++t) {
    if (positions[t] < 0 || positions[t] > t) __builtin_trap();
  }
  return 0;
}
