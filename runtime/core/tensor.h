// A tensor is a typed, shaped view into memory owned elsewhere (a Buffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"

namespace zerod {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Tier tier = Tier::kHost;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t bytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
  template <class T>
  T* as() const { return static_cast<T*>(data); }
  // Element i as float, whatever the dtype.
  float get(int64_t i) const;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace zerod
