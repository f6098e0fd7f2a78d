#include "runtime/model/bnb_nf4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

constexpr const char* kState = ".quant_state.bitsandbytes__nf4";

absl::Status bad(const FoundTensor& f, const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(f.file->path(), ": tensor '", name, "' ", why));
}

// Tensor `name` of type `dtype`.
absl::StatusOr<FoundTensor> present(const TensorLookup& find, const std::string& name, DType dtype) {
  const FoundTensor f = find(name);
  if (!f.t) return absl::InvalidArgumentError(absl::StrCat("the model's files have no tensor '", name, "'"));
  if (f.t->dtype != dtype) {
    return bad(f, name, absl::StrCat("is ", dtype_name(f.t->dtype), ", not ", dtype_name(dtype)));
  }
  return f;
}

// That, of `numel` elements; `what` says what they are for the message.
absl::StatusOr<FoundTensor> part(const TensorLookup& find, const std::string& name, DType dtype, int64_t numel,
                                 const std::string& what) {
  ZEROD_ASSIGN_OR_RETURN(const FoundTensor f, present(find, name, dtype));
  if (f.t->numel() != numel) {
    return bad(f, name, absl::StrCat("has ", f.t->numel(), " values; ", what, " needs ", numel));
  }
  return f;
}

// The 16 NF4 values against zerod's own, bit for bit (bitsandbytes writes
// its published table).
absl::Status same_nf4_values(const FoundTensor& f, const std::string& name) {
  std::array<float, 16> have;
  ZEROD_RETURN_IF_ERROR(f.file->read(*f.t, have.data()));
  if (std::memcmp(have.data(), nf4_values().data(), sizeof have) != 0) {
    return bad(f, name, "is not the map zerod's NF4 dequantizes with (bitsandbytes' own)");
  }
  return absl::OkStatus();
}

// The state's JSON, its keys checked.
absl::StatusOr<float> read_state(const FoundTensor& f, const std::string& name, int64_t out, int64_t in) {
  std::string text(f.t->numel(), '\0');
  ZEROD_RETURN_IF_ERROR(f.file->read(*f.t, text.data()));
  const nlohmann::json s = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!s.is_object()) return bad(f, name, "is not a JSON object's bytes");
  const auto key = [&](const char* k, const nlohmann::json& want, const std::string& why) -> absl::Status {
    const nlohmann::json have = s.value(k, nlohmann::json());
    if (have == want) return absl::OkStatus();
    return bad(f, name, absl::StrCat("gives ", k, " ", have.dump(), ": ", why));
  };
  ZEROD_RETURN_IF_ERROR(key("quant_type", "nf4", "zerod holds 4-bit weights in NF4"));
  ZEROD_RETURN_IF_ERROR(key("blocksize", kNf4Block, "zerod's NF4 blocks are of 64 weights"));
  ZEROD_RETURN_IF_ERROR(key("shape", nlohmann::json::array({out, in}), "the model's layer is of that shape"));
  ZEROD_RETURN_IF_ERROR(key("nested_blocksize", kQuantBlock, "zerod double-quantizes absmax values in groups of 256"));
  ZEROD_RETURN_IF_ERROR(key("nested_dtype", "float32", "the groups' absmax values are fp32"));
  const nlohmann::json offset = s.value("nested_offset", nlohmann::json());
  if (!offset.is_number()) return bad(f, name, absl::StrCat("gives nested_offset ", offset.dump(), ", not a number"));
  return static_cast<float>(offset.get<double>());
}

}  // namespace

std::string bnb_nf4_state_name(const std::string& w) { return w + kState; }

std::vector<std::string> BnbNf4Weight::part_names(const std::string& w) {
  return {w, w + ".absmax", w + ".nested_absmax", w + ".quant_map", w + ".nested_quant_map", w + kState};
}

absl::StatusOr<BnbNf4Weight> open_bnb_nf4(const TensorLookup& find, const std::string& w, int64_t out, int64_t in) {
  BnbNf4Weight r;
  r.out = out;
  r.in = in;
  const Nf4Sizes z = nf4_sizes(out * in);
  const std::string shape = absl::StrCat("[", out, ", ", in, "] in blocks of 64");
  const FoundTensor absmax = find(w + ".absmax");
  if (absmax.t && absmax.t->dtype == DType::kF32 && !find(w + ".nested_absmax").t) {
    return bad(absmax, w + ".absmax",
               "is fp32: the file holds NF4 without double quantization (bnb_4bit_use_double_quant false); zerod "
               "reads it with (true)");
  }
  ZEROD_ASSIGN_OR_RETURN(const FoundTensor state, present(find, w + kState, DType::kU8));
  ZEROD_ASSIGN_OR_RETURN(r.offset, read_state(state, w + kState, out, in));
  ZEROD_ASSIGN_OR_RETURN(r.codes, part(find, w, DType::kU8, z.code_bytes, shape + " at two codes a byte"));
  ZEROD_ASSIGN_OR_RETURN(r.absmax, part(find, w + ".absmax", DType::kU8, z.blocks, shape));
  ZEROD_ASSIGN_OR_RETURN(r.nested_absmax, part(find, w + ".nested_absmax", DType::kF32, z.groups,
                                               absl::StrCat(z.blocks, " blocks in groups of 256")));
  ZEROD_ASSIGN_OR_RETURN(const FoundTensor values, part(find, w + ".quant_map", DType::kF32, 16, "NF4"));
  ZEROD_RETURN_IF_ERROR(same_nf4_values(values, w + ".quant_map"));
  ZEROD_ASSIGN_OR_RETURN(r.map, part(find, w + ".nested_quant_map", DType::kF32, kNf4MapValues,
                                     "the absmax values' map"));
  std::vector<float> map(kNf4MapValues);
  ZEROD_RETURN_IF_ERROR(r.map.file->read(*r.map.t, map.data()));
  if (!std::ranges::all_of(map, [](float v) { return std::isfinite(v) && std::fabs(v) <= 1; })) {
    return bad(r.map, w + ".nested_quant_map", "has a value that is not finite within [-1, 1]");
  }
  return r;
}

absl::Status read_bnb_nf4(const BnbNf4Weight& w, const Nf4Tensor& into) {
  ZEROD_RETURN_IF_ERROR(w.codes.file->read(*w.codes.t, into.codes));
  ZEROD_RETURN_IF_ERROR(w.absmax.file->read(*w.absmax.t, into.absmax_codes));
  ZEROD_RETURN_IF_ERROR(w.nested_absmax.file->read(*w.nested_absmax.t, into.group_absmax));
  ZEROD_RETURN_IF_ERROR(w.map.file->read(*w.map.t, into.map));
  *into.offset = w.offset;
  return absl::OkStatus();
}

}  // namespace zerod
