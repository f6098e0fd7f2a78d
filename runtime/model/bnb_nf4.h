// A linear layer's weight held in NF4 as bitsandbytes saves it (a 4-bit
// model's safetensors, transformers' save_pretrained of Linear4bit):
// `<w>` the codes (U8, two a byte, [n / 2, 1]), `<w>.absmax` (U8, a code a
// block), `<w>.nested_absmax` (F32, a group's), `<w>.quant_map` (the 16 NF4
// values), `<w>.nested_quant_map` (the signed dynamic map) and
// `<w>.quant_state.bitsandbytes__nf4` (U8 bytes of a JSON object:
// quant_type, blocksize, dtype, shape, nested_blocksize, nested_offset).
// These are the parts of zerod's Nf4Tensor (kernels/ops/nf4.h) as they
// are, so a base read from such a file is held with the file's bits.
#pragma once

#include <functional>
#include <string>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/kernels/ops/nf4.h"

namespace zerod {

// A tensor of the model's files, by name: its reader and entry, or nulls.
struct FoundTensor {
  const SafetensorsReader* file = nullptr;
  const SafeTensor* t = nullptr;
};
using TensorLookup = std::function<FoundTensor(const std::string& name)>;

// The name of the tensor that marks weight `w` as held in NF4.
std::string bnb_nf4_state_name(const std::string& w);

// Weight `w`'s NF4 parts, checked against the shape [out, in] it must have:
// every part present with its type and size, the NF4 values zerod's own,
// the absmax values' map within [-1, 1] (it is read with the rest), the
// state NF4 in blocks of 64 with double quantization in groups of 256.
// Errors name the file and the tensor or key.
struct BnbNf4Weight {
  FoundTensor codes, absmax, nested_absmax, map;
  float offset = 0;
  int64_t out = 0, in = 0;
  // Each part's name, for the files' bookkeeping of what was read.
  static std::vector<std::string> part_names(const std::string& w);
};
absl::StatusOr<BnbNf4Weight> open_bnb_nf4(const TensorLookup& find, const std::string& w, int64_t out, int64_t in);

// Its bytes into `into` (of out * in weights).
absl::Status read_bnb_nf4(const BnbNf4Weight& w, const Nf4Tensor& into);

}  // namespace zerod
