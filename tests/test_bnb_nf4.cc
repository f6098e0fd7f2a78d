// A Llama held in NF4 as bitsandbytes saves it (tests/fixtures/hf_llama/
// llama_bnb_nf4, made by scripts/bnb_nf4_fixtures.py with bitsandbytes'
// own quantize_4bit from the tiny Llama's weights in bf16): its values are
// bitsandbytes' dequantization of it, a QLoRA base read from it holds its
// bytes and computes with those values, zerod's quantization of the same
// bf16 weights is bitsandbytes', and bad files are refused naming the
// tensor and what is wrong.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/gpt.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/hf_llama.h"
#include "runtime/model/nf4_weights.h"
#include "runtime/model/param_init.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& file = "") {
  return std::string(ZEROD_SOURCE_DIR) + "/tests/fixtures/hf_llama/llama_bnb_nf4" + (file.empty() ? "" : "/" + file);
}

// A file's tensors by name, as fp32 values.
std::map<std::string, std::vector<float>> values_of(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto r = SafetensorsReader::open(path);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return out;
  for (const SafeTensor& t : r->tensors()) {
    if (t.dtype == DType::kU8) continue;
    std::vector<float>& v = out[t.name];
    v.resize(t.numel());
    EXPECT_TRUE(r->read_f32(t, 0, t.numel(), v.data()).ok());
  }
  return out;
}

// The HF name of Llama linear module t of layer l.
std::string module_name(int l, int t) {
  return "model.layers." + std::to_string(l) + (t < kLoraGate ? ".self_attn." : ".mlp.") +
         lora_target_name(Arch::kLlama, t) + ".weight";
}

// Tensor `name` of the fixture's weights file, as bytes.
std::vector<uint8_t> file_bytes(const std::string& name) {
  auto file = SafetensorsReader::open(fixture("model.safetensors"));
  EXPECT_TRUE(file.ok());
  const SafeTensor* t = file.ok() ? file->find(name) : nullptr;
  std::vector<uint8_t> b(t ? t->end - t->begin : 0);
  if (t) EXPECT_TRUE(file->read(*t, b.data()).ok());
  return b;
}

// A float array's bytes.
std::vector<uint8_t> bytes_of(const float* v, int64_t n) {
  const auto* b = reinterpret_cast<const uint8_t*>(v);
  return {b, b + 4 * n};
}

// Weight `w`'s nested_offset as its state's JSON gives it.
float state_offset(const std::string& w) {
  const std::vector<uint8_t> b = file_bytes(w + ".quant_state.bitsandbytes__nf4");
  return static_cast<float>(nlohmann::json::parse(std::string(b.begin(), b.end())).at("nested_offset").get<double>());
}

class BnbNf4 : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    auto c = read_hf_config(fixture());
    ASSERT_TRUE(c.ok()) << c.status();
    cfg_ = *c;
    cfg_.block_size = 16;
    layout_ = std::make_unique<GptLayout>(cfg_);
  }
  // The model's values as LlamaWeights reads them from `dir`.
  std::vector<float> read_all(const std::string& dir) {
    auto w = LlamaWeights::open(dir, *layout_);
    EXPECT_TRUE(w.ok()) << w.status();
    std::vector<float> v(layout_->num_params(), NAN);
    if (w.ok()) EXPECT_TRUE(w->read(0, layout_->num_params(), v.data()).ok());
    return v;
  }
  GptConfig cfg_;
  std::unique_ptr<GptLayout> layout_;
};

// Each linear layer's values are bitsandbytes' fp32 dequantization,
// transposed into zerod's product; the embeddings, norms and head are the
// file's bf16 values.
TEST_F(BnbNf4, ValuesAreBitsandbytesDequantization) {
  const std::vector<float> got = read_all(fixture());
  const auto dequantized = values_of(fixture("dequantized.safetensors"));
  const auto file = values_of(fixture("model.safetensors"));
  ASSERT_EQ(dequantized.size(), 7u * cfg_.n_layer);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraTargetDims d = lora_target_dims(cfg_, t);
      const std::vector<float>& want = dequantized.at(module_name(l, t));
      const float* w = got.data() + layout_->offset(lora_target_product(Arch::kLlama, t), l);
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) {
          ASSERT_EQ(w[int64_t(i) * d.width + d.col0 + o], want[int64_t(o) * d.in + i]) << module_name(l, t);
        }
      }
    }
    const std::vector<float>& norm = file.at("model.layers." + std::to_string(l) + ".input_layernorm.weight");
    EXPECT_TRUE(std::equal(norm.begin(), norm.end(), got.begin() + layout_->offset(kLn1W, l)));
  }
  const std::vector<float>& emb = file.at("model.embed_tokens.weight");
  EXPECT_TRUE(std::equal(emb.begin(), emb.end(), got.begin() + layout_->offset(kWte, 0)));
  const std::vector<float>& head = file.at("lm_head.weight");
  EXPECT_TRUE(std::equal(head.begin(), head.end(), got.begin() + layout_->offset(kLmHead, 0)));
}

// A QLoRA base read from the file holds its NF4 bytes: every part of every
// module is the file's, and a pass over it is the pass over the dequantized
// values to the bit.
TEST_F(BnbNf4, AQloraBaseHoldsTheFilesBytes) {
  auto held = held_nf4_modules(*layout_, fixture());
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(*held);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraTargetDims d = lora_target_dims(cfg_, t);
      const Nf4HostTensor into(int64_t(d.out) * d.in);
      auto read = (*held)(l, t, into.t);
      const std::string name = module_name(l, t);
      ASSERT_TRUE(read.ok() && *read) << name;
      EXPECT_EQ(into.codes, file_bytes(name)) << name;
      EXPECT_EQ(into.absmax_codes, file_bytes(name + ".absmax")) << name;
      EXPECT_EQ(bytes_of(into.t.group_absmax, nf4_sizes(into.t.n).groups), file_bytes(name + ".nested_absmax")) << name;
      EXPECT_EQ(bytes_of(into.t.map, kNf4MapValues), file_bytes(name + ".nested_quant_map")) << name;
      EXPECT_EQ(*into.t.offset, state_offset(name)) << name;
    }
  }

  const std::vector<float> values = read_all(fixture());
  const ParamInit init = *initial_params(*layout_, 0, fixture());
  testing::CpuRig rig;
  auto nf4 = Nf4Weights::create(layout_.get(), init, *held, rig.device, *rig.kernels);
  ASSERT_TRUE(nf4.ok()) << nf4.status();
  auto flat = FlatWeights::create(layout_.get(), DType::kF32, values.data(), rig.device, *rig.kernels);
  ASSERT_TRUE(flat.ok());
  const int B = 2, T = 16;
  auto model = Gpt::create(cfg_, B, T, DType::kF32, false, rig.device, *rig.kernels);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<int32_t> tokens(B * T + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37) % cfg_.vocab_size);
  const auto loss = [&](WeightSource& w) {
    std::vector<float> grads(layout_->num_params(), 0.0f);
    FlatGrads sink(layout_.get(), grads.data());
    return *(*model)->forward_backward(w, sink, tokens.data(), tokens.data() + 1, B, T, 1.0f);
  };
  EXPECT_EQ(loss(*nf4), loss(*flat));
}

// zerod's quantization of the bf16 weights bitsandbytes quantized gives
// the file's codes, absmax codes and groups' absmax values, with a map
// within two ulps of the file's (torch's vectorized linspace, which
// bitsandbytes builds it with, rounds some values apart from the scalar
// one zerod follows).
TEST_F(BnbNf4, ZerodQuantizesAsBitsandbytesDoes) {
  const auto originals = values_of(fixture("originals.safetensors"));
  for (int l = 0; l < cfg_.n_layer; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const std::string name = module_name(l, t);
      const std::vector<float>& w = originals.at(name);
      const Nf4HostTensor q(static_cast<int64_t>(w.size()));
      nf4_quantize(w.data(), q.t);
      EXPECT_EQ(q.codes, file_bytes(name)) << name;
      EXPECT_EQ(q.absmax_codes, file_bytes(name + ".absmax")) << name;
      EXPECT_EQ(bytes_of(q.t.group_absmax, nf4_sizes(q.t.n).groups), file_bytes(name + ".nested_absmax")) << name;
      EXPECT_EQ(*q.t.offset, state_offset(name)) << name;
      const std::vector<uint8_t> file_map = file_bytes(name + ".nested_quant_map");
      ASSERT_EQ(file_map.size(), 4u * kNf4MapValues);
      for (int j = 0; j < kNf4MapValues; ++j) {
        float v;
        std::memcpy(&v, file_map.data() + 4 * j, 4);
        EXPECT_LE(std::abs(int64_t(std::bit_cast<int32_t>(v)) - std::bit_cast<int32_t>(q.t.map[j])), 2)
            << name << " " << j;
      }
      // The same read in place from the product's [in, out] operands
      // (transposed here by hand): the same bytes.
      const LoraTargetDims d = lora_target_dims(cfg_, t);
      std::vector<float> product(w.size());
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) product[int64_t(i) * d.out + o] = w[int64_t(o) * d.in + i];
      }
      const Nf4HostTensor p(static_cast<int64_t>(w.size()));
      nf4_quantize_transposed(product.data(), d.in, d.out, p.t);
      EXPECT_EQ(p.codes, q.codes) << name;
      EXPECT_EQ(p.absmax_codes, q.absmax_codes) << name;
      EXPECT_EQ(p.floats, q.floats) << name;
    }
  }
}

// The fixture's tensors by name: each entry and its bytes.
using Tensors = std::map<std::string, std::pair<SafeTensor, std::vector<uint8_t>>>;

class BnbNf4BadFile : public BnbNf4 {
 protected:
  // A directory holding the fixture's config and its weights with `edit`
  // applied.
  std::string edited(const std::function<void(Tensors&)>& edit) {
    const std::string dir = path("copy" + std::to_string(copies_++));
    fs::create_directories(dir);
    fs::copy(fixture("config.json"), dir + "/config.json");
    auto r = SafetensorsReader::open(fixture("model.safetensors"));
    EXPECT_TRUE(r.ok());
    Tensors ts;
    for (const SafeTensor& t : r->tensors()) {
      std::vector<uint8_t> b(t.end - t.begin);
      EXPECT_TRUE(r->read(t, b.data()).ok());
      ts[t.name] = {t, std::move(b)};
    }
    edit(ts);
    std::vector<SafeTensor> entries;
    std::vector<const std::vector<uint8_t>*> data;
    for (const auto& [name, e] : ts) {
      entries.push_back({name, e.first.dtype, e.first.shape});
      data.push_back(&e.second);
    }
    const auto written = write_safetensors(dir + "/model.safetensors", entries, {}, [&](size_t i, const ByteSink& out) {
      return out(data[i]->data(), data[i]->size());
    });
    EXPECT_TRUE(written.ok()) << written.status();
    return dir;
  }
  // Opening `dir` fails as bad input, with `words` in the message.
  void expect_refused(const std::string& dir, const std::string& words) {
    auto w = LlamaWeights::open(dir, *layout_);
    ASSERT_FALSE(w.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(w.status())) << w.status();
    EXPECT_NE(w.status().message().find(words), std::string::npos) << w.status();
  }
  int copies_ = 0;
};

// The state's JSON with `key` set to `value`.
std::function<void(Tensors&)> state_with(const std::string& w, const std::string& key, const nlohmann::json& value) {
  return [=](Tensors& ts) {
    std::vector<uint8_t>& b = ts.at(w + ".quant_state.bitsandbytes__nf4").second;
    nlohmann::json s = nlohmann::json::parse(std::string(b.begin(), b.end()));
    s[key] = value;
    const std::string text = s.dump();
    b.assign(text.begin(), text.end());
    ts.at(w + ".quant_state.bitsandbytes__nf4").first.shape = {static_cast<int64_t>(text.size())};
  };
}

TEST_F(BnbNf4BadFile, IsRefusedNamingTheTensorAndWhatIsWrong) {
  const std::string k = module_name(1, kLoraK);  // [16, 32]: 8 blocks of 64, one group
  const auto resized = [](const std::string& name, int64_t numel, int64_t bytes_each) {
    return [=](Tensors& ts) {
      ts.at(name).first.shape = {numel};
      ts.at(name).second.resize(numel * bytes_each);
    };
  };
  const std::pair<std::function<void(Tensors&)>, std::string> cases[] = {
      {resized(k + ".absmax", 7, 1),
       "tensor '" + k + ".absmax' has 7 values; [16, 32] in blocks of 64 needs 8"},
      {resized(k, 255, 1), "tensor '" + k + "' has 255 values; [16, 32] in blocks of 64 at two codes a byte needs 256"},
      {resized(k + ".nested_absmax", 2, 4), "tensor '" + k + ".nested_absmax' has 2 values; 8 blocks in groups"},
      {state_with(k, "shape", {32, 16}), "gives shape [32,16]: the model's layer is of that shape"},
      {state_with(k, "blocksize", 128), "gives blocksize 128"},
      {state_with(k, "quant_type", "fp4"), "gives quant_type \"fp4\""},
      {state_with(k, "nested_blocksize", 128), "gives nested_blocksize 128"},
      {state_with(k, "nested_offset", "x"), "gives nested_offset \"x\", not a number"},
      {[&](Tensors& ts) { ts.erase(k + ".nested_absmax"); }, "no tensor '" + k + ".nested_absmax'"},
      {[&](Tensors& ts) { ts.at(k + ".quant_map").second[0] ^= 1; }, "'" + k + ".quant_map' is not the map"},
      {[&](Tensors& ts) {
         const float two = 2.0f;
         std::memcpy(ts.at(k + ".nested_quant_map").second.data() + 40, &two, 4);
       },
       "'" + k + ".nested_quant_map' has a value that is not finite within [-1, 1]"},
      {[&](Tensors& ts) {
         ts.erase(k + ".nested_absmax");
         ts.erase(k + ".nested_quant_map");
         ts.at(k + ".absmax").first.dtype = DType::kF32;
         ts.at(k + ".absmax").second.resize(8 * 4);
       },
       "without double quantization"},
      {[&](Tensors& ts) { ts.at(k + ".quant_state.bitsandbytes__nf4").second.back() = '!'; }, "is not a JSON object"},
      {[&](Tensors& ts) { ts.at(k + ".absmax").first.dtype = DType::kI8; }, "'" + k + ".absmax' is int8, not uint8"},
  };
  for (const auto& [edit, words] : cases) {
    SCOPED_TRACE(words);
    expect_refused(edited(edit), words);
  }
  // The untouched copy opens, and a stray part of a layer is still refused.
  EXPECT_TRUE(LlamaWeights::open(edited([](Tensors&) {}), *layout_).ok());
  expect_refused(edited([&](Tensors& ts) { ts[k + ".absmax2"] = ts.at(k + ".absmax"); }),
                 "has a tensor '" + k + ".absmax2' that this model does not");
  // One layer in bf16 among NF4 ones reads as values, but is no base to
  // hold in NF4.
  const std::string mixed = edited([&](Tensors& ts) {
    for (const std::string& name : BnbNf4Weight::part_names(k)) ts.erase(name);
    ts[k] = {{k, DType::kBF16, {16, 32}}, std::vector<uint8_t>(16 * 32 * 2, 0)};
  });
  EXPECT_TRUE(LlamaWeights::open(mixed, *layout_).ok());
  auto held = held_nf4_modules(*layout_, mixed);
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.status().message().find("holds 13 of the model's 14 linear layers in NF4"), std::string::npos)
      << held.status();
}

}  // namespace
}  // namespace zerod
