// For the GPU tests: the machine's first GPU with its kernel table, or a
// skip saying there is none; and host vectors to and from its memory.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/kernels/kernels.h"

namespace zerod::testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
    auto d = open_device("cuda");
    ASSERT_TRUE(d.ok()) << d.status();
    gpu_ = std::move(*d);
    auto k = kernels_for(*gpu_);
    ASSERT_TRUE(k.ok()) << k.status();
    k_ = std::move(*k);
  }
  void TearDown() override {
    buffers_.clear();
    k_.reset();
    gpu_.reset();
  }

  Stream& s() { return gpu_->compute_stream(); }

  // A device copy of v, alive until the test ends.
  template <class T>
  T* up(const std::vector<T>& v) {
    auto b = gpu_->allocate(v.size() * sizeof(T) + 1, Category::kWorkspace);
    EXPECT_TRUE(b.ok()) << b.status();
    gpu_->copy(s(), b->data(), v.data(), v.size() * sizeof(T));
    buffers_.push_back(std::move(*b));
    return buffers_.back().ptr<T>();
  }
  // The GPU's table for operands of type t.
  std::unique_ptr<Kernels> table(DType t) {
    auto k = kernels_for(*gpu_, t);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? std::move(*k) : nullptr;
  }
  // v's values as operands of type t on the device; v is rounded to them in
  // place first, so that a CPU reference takes the values the GPU does.
  void* up_as(DType t, std::vector<float>& v) {
    round_to(t, v.data(), v.size());
    if (t == DType::kF32) return up(v);
    std::vector<uint16_t> h(v.size());
    convert_from_f32(t, v.data(), h.data(), v.size());
    return up(h);
  }
  // n operands of type t at p, as fp32 values.
  std::vector<float> down_as(DType t, const void* p, size_t n) {
    if (t == DType::kF32) return down(static_cast<const float*>(p), n);
    const std::vector<uint16_t> h = down(static_cast<const uint16_t*>(p), n);
    std::vector<float> v(n);
    convert_to_f32(t, h.data(), v.data(), n);
    return v;
  }
  // n elements at p on the device, once the stream's work is done.
  template <class T>
  std::vector<T> down(const T* p, size_t n) {
    std::vector<T> v(n);
    gpu_->copy(s(), v.data(), p, n * sizeof(T));
    EXPECT_TRUE(gpu_->synchronize(s()).ok());
    return v;
  }

  std::unique_ptr<Device> gpu_;
  std::unique_ptr<Kernels> k_;
  std::vector<Buffer> buffers_;
};

}  // namespace zerod::testing
