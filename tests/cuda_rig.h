// For the GPU tests: the machine's first GPU with its kernel table, or a
// skip saying there is none; and host vectors to and from its memory.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/core/device.h"
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
