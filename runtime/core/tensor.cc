#include "runtime/core/tensor.h"

#include "absl/strings/str_join.h"

namespace zerod {

float Tensor::get(int64_t i) const {
  switch (dtype) {
    case DType::kF32: return as<float>()[i];
    case DType::kBF16: return bf16_to_float(as<uint16_t>()[i]);
    case DType::kF16: return f16_to_float(as<uint16_t>()[i]);
    case DType::kI8: return as<int8_t>()[i];
    case DType::kU8: return as<uint8_t>()[i];
  }
  return 0;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

}  // namespace zerod
