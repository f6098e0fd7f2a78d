// Hugging Face GPT-2 export (zero-worker export) and import (model.init_from):
// the file follows the safetensors format as read by a minimal reader
// written here, names and shapes are GPT-2's, a round trip is bitwise, and
// bad files are refused naming the file and the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/trainer.h"
#include "runtime/engine/worker.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

using Exit = testing::WorkerResult;
Exit zero_worker(std::vector<std::string> args) { return testing::run_worker_with(std::move(args)); }

// The format read from its definition: a little-endian u64 header length,
// the JSON header, the data. Every entry's range must lie in the data, and
// the ranges, sorted, must tile it with no gap or overlap.
struct MinimalSafetensors {
  nlohmann::json header;
  std::string data;
  std::map<std::string, std::string> bytes;  // by tensor name
};
MinimalSafetensors parse_minimal(const std::string& file) {
  MinimalSafetensors f;
  EXPECT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint8_t>(file[i]);
  EXPECT_LE(8 + n, file.size());
  f.header = nlohmann::json::parse(file.substr(8, n));
  f.data = file.substr(8 + n);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const std::map<std::string, uint64_t> sizes = {{"F32", 4}, {"BF16", 2}, {"F16", 2}};
  for (const auto& [name, e] : f.header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    uint64_t numel = 1;
    for (uint64_t d : e["shape"]) numel *= d;
    EXPECT_EQ(end - b, numel * sizes.at(e["dtype"])) << name;
    ranges.push_back({b, end});
    f.bytes[name] = f.data.substr(b, end - b);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, end] : ranges) {
    EXPECT_EQ(b, at) << "a gap or an overlap";
    at = end;
  }
  EXPECT_EQ(at, f.data.size());
  return f;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class HfGpt2Test : public testing::TempDirTest {
 protected:
  JobConfig config(const std::vector<std::string>& overrides) { return testing::config_with(testing::tiny_job(), overrides); }

  // Trains 3 steps and saves; the checkpoint's path and master weights.
  std::pair<std::string, std::vector<float>> trained(const std::vector<std::string>& overrides) {
    auto t = testing::make_trainer(config(overrides));
    EXPECT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE((*t)->step().ok());
    auto ck = (*t)->save_checkpoint(path("ck"), 1);
    EXPECT_TRUE(ck.ok()) << ck.status();
    return {*ck, *(*t)->master_params()};
  }

  std::vector<float> imported(const std::string& file, const std::vector<std::string>& overrides = {}) {
    std::vector<std::string> o = overrides;
    o.push_back("model.init_from=" + file);
    auto t = testing::make_trainer(config(o));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *(*t)->master_params() : std::vector<float>();
  }

  // `tensors` (those of r, then more) written to dir/model.safetensors,
  // those past r's filled with the bytes of r's tensor `head`, repeated.
  std::string with_head(const SafetensorsReader& r, const std::vector<SafeTensor>& tensors, const std::string& dir,
                        const SafeTensor& head) {
    fs::create_directories(path(dir));
    const std::string file = path(dir + "/model.safetensors");
    EXPECT_TRUE(write_safetensors(file, tensors, {}, [&](size_t i, const ByteSink& out) -> absl::Status {
                  std::vector<char> buf(tensors[i].numel() * dtype_size(tensors[i].dtype));
                  if (i < r.tensors().size()) {
                    ZEROD_RETURN_IF_ERROR(r.read(r.tensors()[i], buf.data()));
                  } else {
                    std::vector<char> src(head.end - head.begin);
                    ZEROD_RETURN_IF_ERROR(r.read(head, src.data()));
                    for (size_t b = 0; b < buf.size(); ++b) buf[b] = src[b % src.size()];
                  }
                  return out(buf.data(), buf.size());
                }).ok());
    return file;
  }

  absl::Status import_error(const std::string& file) {
    auto t = testing::make_trainer(config({"model.init_from=" + file}));
    return t.status();
  }
};

TEST_F(HfGpt2Test, ExportWritesGpt2NamesShapesAndValues) {
  const auto [ck, master] = trained({"zero_optimization.stage=2"});
  const Exit e = zero_worker({"export", "--checkpoint", path("ck"), "--out", path("hf")});
  ASSERT_EQ(e.code, kExitOk) << e.err;
  EXPECT_NE(e.out.find("120576 parameters"), std::string::npos) << e.out;

  const MinimalSafetensors f = parse_minimal(testing::read_file(path("hf/model.safetensors")));
  // gpt2-tiny: 2 layers, C = 64, vocabulary 256, 64 positions.
  const int64_t C = 64;
  std::map<std::string, std::vector<int64_t>> want = {
      {"wte.weight", {256, C}}, {"wpe.weight", {64, C}}, {"ln_f.weight", {C}}, {"ln_f.bias", {C}}};
  for (int l = 0; l < 2; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    want[h + "ln_1.weight"] = want[h + "ln_1.bias"] = want[h + "ln_2.weight"] = want[h + "ln_2.bias"] = {C};
    want[h + "attn.c_attn.weight"] = {C, 3 * C};
    want[h + "attn.c_attn.bias"] = {3 * C};
    want[h + "attn.c_proj.weight"] = {C, C};
    want[h + "attn.c_proj.bias"] = want[h + "mlp.c_proj.bias"] = {C};
    want[h + "mlp.c_fc.weight"] = {C, 4 * C};
    want[h + "mlp.c_fc.bias"] = {4 * C};
    want[h + "mlp.c_proj.weight"] = {4 * C, C};
  }
  ASSERT_EQ(f.bytes.size(), want.size());
  // The flat buffer is the tensors in this order, each Conv1D weight [in, out].
  const std::vector<std::string> order = {"wte.weight", "wpe.weight"};
  std::vector<std::string> all = order;
  for (int l = 0; l < 2; ++l) {
    for (const char* n : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      all.push_back("h." + std::to_string(l) + "." + n);
    }
  }
  all.push_back("ln_f.weight");
  all.push_back("ln_f.bias");
  size_t at = 0;
  for (const std::string& name : all) {
    SCOPED_TRACE(name);
    ASSERT_EQ(f.header[name]["dtype"], "F32");
    EXPECT_EQ(f.header[name]["shape"].get<std::vector<int64_t>>(), want[name]);
    const std::string& b = f.bytes.at(name);
    ASSERT_LE(at + b.size() / 4, master.size());
    EXPECT_EQ(std::memcmp(b.data(), master.data() + at, b.size()), 0);
    at += b.size() / 4;
  }
  EXPECT_EQ(at, master.size());

  const nlohmann::json c = nlohmann::json::parse(testing::read_file(path("hf/config.json")));
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_head"], 2);
  EXPECT_EQ(c["n_embd"], 64);
  EXPECT_EQ(c["vocab_size"], 256);
  EXPECT_EQ(c["n_positions"], 64);
  EXPECT_EQ(c["activation_function"], "gelu_new");
}

// Exported in fp32 and imported, the master weights are the trained ones
// bit for bit, also when stage 3 ranks keep their parameters offloaded; in
// bf16 they are the trained ones rounded to bf16.
TEST_F(HfGpt2Test, ExportThenImportIsBitwise) {
  const auto [ck, master] = trained({"bf16.enabled=true", "zero_optimization.stage=3",
                                     "optimizer.type=AdamW8bit"});
  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf")}).code, kExitOk);
  const std::string file = path("hf/model.safetensors");
  EXPECT_TRUE(same_bits(imported(file), master));
  EXPECT_TRUE(same_bits(imported(file, {"zero_optimization.stage=3", "zero_optimization.offload_param.device=nvme",
                                        "zero_optimization.offload_param.nvme_path=" + path(".")}),
                        master));

  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf16"), "--dtype", "bf16"}).code, kExitOk);
  std::vector<uint16_t> b16(master.size());
  std::vector<float> rounded(master.size());
  convert_from_f32(DType::kBF16, master.data(), b16.data(), master.size());
  convert_to_f32(DType::kBF16, b16.data(), rounded.data(), master.size());
  EXPECT_FALSE(same_bits(rounded, master));
  EXPECT_TRUE(same_bits(imported(path("hf16/model.safetensors")), rounded));
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(path("hf16/config.json")))["torch_dtype"], "bfloat16");
}

// GPT2LMHeadModel's files put the model under "transformer." and may carry
// the attention-mask buffers and the tied head; they import the same.
TEST_F(HfGpt2Test, ImportsPrefixedNamesAndIgnoresBuffers) {
  const auto [ck, master] = trained({});
  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf")}).code, kExitOk);
  auto r = SafetensorsReader::open(path("hf/model.safetensors"));
  ASSERT_TRUE(r.ok());
  std::vector<SafeTensor> tensors;
  for (SafeTensor t : r->tensors()) {
    t.name = "transformer." + t.name;
    tensors.push_back(t);
  }
  tensors.push_back({"transformer.h.0.attn.bias", DType::kF32, {1, 1, 64, 64}});
  tensors.push_back({"lm_head.weight", DType::kF32, {256, 64}});
  EXPECT_TRUE(same_bits(imported(with_head(*r, tensors, "prefixed", *r->find("wte.weight"))), master));
}

// The GPT2Config values that describe zerod's own GPT-2 import the same.
TEST_F(HfGpt2Test, AConfigThatDescribesThisGpt2ImportsTheSame) {
  const auto [ck, master] = trained({});
  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf")}).code, kExitOk);
  for (const char* config :
       {R"({"activation_function": "gelu_pytorch_tanh", "n_inner": null, "reorder_and_upcast_attn": true})",
        R"({"model_type": "gpt2", "n_inner": 256, "layer_norm_epsilon": 1e-05, "tie_word_embeddings": true,
            "scale_attn_weights": true, "scale_attn_by_inverse_layer_idx": false})"}) {
    SCOPED_TRACE(config);
    write("hf/config.json", config);
    EXPECT_TRUE(same_bits(imported(path("hf/model.safetensors")), master));
  }
}

// An LM head in the file must be wte's copy (zerod ties them): one of
// another shape or other values is refused, naming the tensor.
TEST_F(HfGpt2Test, AnUntiedHeadIsRefused) {
  const auto [ck, master] = trained({});
  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf")}).code, kExitOk);
  auto r = SafetensorsReader::open(path("hf/model.safetensors"));
  ASSERT_TRUE(r.ok());
  std::vector<SafeTensor> tensors = r->tensors();
  tensors.push_back({"lm_head.weight", DType::kF32, {256, 64}});
  const std::string untied = with_head(*r, tensors, "untied", *r->find("wpe.weight"));  // wpe's values, repeated
  EXPECT_NE(import_error(untied).message().find("untied/model.safetensors: tensor 'lm_head.weight' differs from wte"),
            std::string::npos)
      << import_error(untied);
  tensors.back().shape = {64, 256};
  const std::string transposed = with_head(*r, tensors, "transposed-head", *r->find("wte.weight"));
  EXPECT_NE(import_error(transposed).message().find("tensor 'lm_head.weight' is fp32 of shape [64,256]"),
            std::string::npos)
      << import_error(transposed);
}

// Each bad file is refused before anything is allocated, naming the file
// and the tensor or field; zero-worker exits 2.
TEST_F(HfGpt2Test, RefusesBadWeightFiles) {
  const auto [ck, master] = trained({});
  ASSERT_EQ(zero_worker({"export", "--checkpoint", ck, "--out", path("hf")}).code, kExitOk);
  auto r = SafetensorsReader::open(path("hf/model.safetensors"));
  ASSERT_TRUE(r.ok());
  // A copy of the export with one change to its tensor list.
  const auto variant = [&](const std::string& name, const std::function<void(std::vector<SafeTensor>&)>& change) {
    std::vector<SafeTensor> tensors = r->tensors();
    change(tensors);
    fs::create_directories(path(name));
    const std::string file = path(name + "/model.safetensors");
    EXPECT_TRUE(write_safetensors(file, tensors, {},
                                  [&](size_t i, const ByteSink& out) {
                                    const std::vector<char> zeros(tensors[i].numel() * dtype_size(tensors[i].dtype));
                                    return out(zeros.data(), zeros.size());
                                  })
                    .ok());
    return file;
  };
  const auto expect_refused = [&](const std::string& file, const std::string& text) {
    const absl::Status s = import_error(file);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s;
    const std::string job = write("job.json", testing::tiny_job().dump());
    const Exit e = zero_worker({"--config", job, "--set", "model.init_from=" + file});
    EXPECT_EQ(e.code, kExitBadInput);
    EXPECT_NE(e.err.find(text), std::string::npos) << e.err;
  };
  const auto find = [](std::vector<SafeTensor>& t, const std::string& name) {
    return std::find_if(t.begin(), t.end(), [&](const SafeTensor& x) { return x.name == name; });
  };
  expect_refused(variant("transposed", [&](auto& t) { find(t, "h.1.attn.c_attn.weight")->shape = {192, 64}; }),
                 "transposed/model.safetensors: tensor 'h.1.attn.c_attn.weight' has shape [192,64], the model needs "
                 "[64,192]");
  expect_refused(variant("missing", [&](auto& t) { t.erase(find(t, "h.0.mlp.c_fc.bias")); }),
                 "missing/model.safetensors: has no tensor 'h.0.mlp.c_fc.bias'");
  expect_refused(variant("extra", [&](auto& t) { t.push_back({"h.2.ln_1.weight", DType::kF32, {64}}); }),
                 "has a tensor 'h.2.ln_1.weight' that a GPT-2 of this shape does not");
  expect_refused(variant("int8", [&](auto& t) { find(t, "ln_f.bias")->dtype = DType::kI8; }),
                 "tensor 'ln_f.bias' is int8");
  // A file of fewer positions than the job's sequences (block_size 64).
  expect_refused(variant("short", [&](auto& t) { find(t, "wpe.weight")->shape = {32, 64}; }),
                 "short/model.safetensors: tensor 'wpe.weight' is [32,64]: the file's model has 32 positions, fewer "
                 "than model.block_size 64: set model.block_size (and data.seq_len) to at most 32");
  // A config.json of another model beside the weights.
  fs::create_directories(path("other"));
  fs::copy_file(path("hf/model.safetensors"), path("other/model.safetensors"));
  write("other/config.json", R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 64})");
  expect_refused(path("other/model.safetensors"), "other/config.json: 'n_layer' is 12 but the job's model has 2");
  write("other/config.json", R"({"model_type": "gpt2", "n_positions": 32})");
  expect_refused(path("other/model.safetensors"),
                 "other/config.json: 'n_positions' is 32: the file's model has 32 positions, fewer than "
                 "model.block_size 64");
  write("other/config.json", R"({"model_type": "gpt2", "n_layer": 12, "n_layer": 2, "n_embd": 64})");
  expect_refused(path("other/model.safetensors"),
                 "other/config.json is not valid JSON: duplicate key 'n_layer' in the top level");
  // What zerod's GPT-2 does otherwise, named with what it has.
  for (const auto& [field, message] : std::vector<std::pair<std::string, std::string>>{
           {R"("model_type": "llama")", R"('model_type' is "llama"; zerod's GPT-2 has "gpt2")"},
           {R"("activation_function": "gelu")",
            R"('activation_function' is "gelu"; zerod's GPT-2 has "gelu_new" or "gelu_pytorch_tanh")"},
           {R"("layer_norm_epsilon": 1e-6)", "'layer_norm_epsilon' is 1e-06; zerod's GPT-2 has 1e-05"},
           {R"("tie_word_embeddings": false)", "'tie_word_embeddings' is false; zerod's GPT-2 has true"},
           {R"("scale_attn_weights": false)", "'scale_attn_weights' is false; zerod's GPT-2 has true"},
           {R"("scale_attn_by_inverse_layer_idx": true)",
            "'scale_attn_by_inverse_layer_idx' is true; zerod's GPT-2 has false"},
           {R"("n_inner": 100)", "'n_inner' is 100; zerod's GPT-2 has null or 256"}}) {
    write("other/config.json", "{\"n_layer\": 2, " + field + "}");
    expect_refused(path("other/model.safetensors"), "other/config.json: " + message);
  }
  // A NaN among the weights, found as they are read, before any step.
  fs::create_directories(path("nan"));
  std::string bytes = testing::read_file(path("hf/model.safetensors"));
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&bytes[8 + header + r->find("h.1.mlp.c_fc.bias")->begin + 4 * 5], &nan, 4);
  write("nan/model.safetensors", bytes);
  expect_refused(path("nan/model.safetensors"),
                 "nan/model.safetensors: tensor 'h.1.mlp.c_fc.bias' holds nan at element 5: weights must be finite");
  // The directory instead of the file in it.
  expect_refused(path("hf"), path("hf") + " is a directory: model.init_from names the weights file itself (" +
                                 path("hf/model.safetensors") + ")");
  // Not a safetensors file; no file.
  fs::create_directories(path("junk"));
  write("junk/model.safetensors", "not a weights file at all");
  EXPECT_EQ(import_error(path("junk/model.safetensors")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(import_error(path("absent/model.safetensors")).ok());
}

TEST_F(HfGpt2Test, ExportRefusesBadCheckpointsAndArguments) {
  const auto [ck, master] = trained({"zero_optimization.stage=1"});
  const auto refused = [&](std::vector<std::string> args, const std::string& text) {
    args.insert(args.begin(), "export");
    const Exit e = zero_worker(args);
    EXPECT_EQ(e.code, kExitBadInput) << e.out;
    EXPECT_NE(e.err.find(text), std::string::npos) << e.err;
    EXPECT_FALSE(fs::exists(path("out/model.safetensors")));
  };
  refused({"--checkpoint", path("absent"), "--out", path("out")}, "no checkpoint manifest");
  refused({"--checkpoint", ck, "--out", path("out"), "--dtype", "int8"}, "--dtype");
  refused({"--checkpoint", ck}, "--out");
  std::fstream f(ck + "/rank-00000.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(1000);
  f.put('\x5a');
  f.close();
  refused({"--checkpoint", ck, "--out", path("out")}, "rank-00000.safetensors: checksum or size does not match");
}

}  // namespace
}  // namespace zerod
