// The NCCL communicator in a world of one on this machine's GPU: every
// collective still goes through NCCL and the comm stream, on device buffers
// copied back and compared with what plain loops compute on the host.
// Values are small integers, so sums and averages are exact in fp32 and bf16.
#include <gtest/gtest.h>

#ifdef ZEROD_WITH_NCCL
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "comm/nccl_communicator.h"
#include "runtime/core/gpu_memory.h"
#include "runtime/core/dtype.h"
#endif

namespace zerod {
namespace {

#ifdef ZEROD_WITH_NCCL

// What rank r contributes at element i.
float value(int r, int64_t i) { return static_cast<float>((r + 1) * 3 + i % 17 - 8); }

float reduce(ReduceOp op, int world, int64_t i) {
  float sum = 0, mx = value(0, i);
  for (int r = 0; r < world; ++r) {
    sum += value(r, i);
    mx = std::max(mx, value(r, i));
  }
  return op == ReduceOp::kSum ? sum : op == ReduceOp::kAvg ? sum / world : mx;
}

// A device copy of a host vector, read back with host().
template <typename T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& init) : n_(init.size()) {
    absl::StatusOr<void*> p = gpu_alloc(bytes());
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) ptr_ = *p;
    EXPECT_EQ(cudaMemcpy(ptr_, init.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVector() { gpu_free(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  size_t n_;
  void* ptr_ = nullptr;
};

class Nccl : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports none";
    absl::StatusOr<NcclId> id = make_nccl_id();
    ASSERT_TRUE(id.ok()) << id.status();
    auto comm = make_nccl_communicator(0, 1, 0, *id, std::chrono::seconds(60));
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world_size(); }

  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(Nccl, IsAWorldOfOneOverNccl) {
  EXPECT_STREQ(comm_->backend(), "nccl");
  EXPECT_EQ(rank(), 0);
  EXPECT_EQ(world(), 1);
  EXPECT_TRUE(comm_->barrier()->wait().ok());
}

TEST_F(Nccl, AllReduceSumAvgMaxInF32AndBF16) {
  const int64_t count = 1001;  // not a multiple of anything
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    SCOPED_TRACE(reduce_op_name(op));
    std::vector<float> f(count);
    std::vector<uint16_t> h(count);
    for (int64_t i = 0; i < count; ++i) f[i] = value(rank(), i);
    convert_from_f32(DType::kBF16, f.data(), h.data(), count);
    DeviceVector<float> df(f);
    DeviceVector<uint16_t> dh(h);
    absl::Status s = comm_->all_reduce(df.get(), count, CommType::kF32, op)->wait();
    ASSERT_TRUE(s.ok()) << s;
    s = comm_->all_reduce(dh.get(), count, CommType::kBF16, op)->wait();
    ASSERT_TRUE(s.ok()) << s;
    f = df.host();
    h = dh.host();
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(f[i], reduce(op, world(), i)) << "element " << i;
      ASSERT_EQ(bf16_to_float(h[i]), reduce(op, world(), i)) << "element " << i;
    }
  }
}

TEST_F(Nccl, ReduceScatterGivesEachRankItsBlock) {
  const int64_t count = 333;
  std::vector<float> send(count * world());
  for (int64_t i = 0; i < count * world(); ++i) send[i] = value(rank(), i);
  DeviceVector<float> dsend(send);
  DeviceVector<float> drecv(std::vector<float>(count, -1.0f));
  absl::Status s = comm_->reduce_scatter(dsend.get(), drecv.get(), count, CommType::kF32, ReduceOp::kSum)->wait();
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> recv = drecv.host();
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(recv[i], reduce(ReduceOp::kSum, world(), rank() * count + i)) << "element " << i;
  }
}

TEST_F(Nccl, AllGatherInPlaceAndFromASeparateBuffer) {
  const int64_t count = 129;
  std::vector<float> mine(count), in_place(count * world(), -1.0f);
  for (int64_t i = 0; i < count; ++i) in_place[rank() * count + i] = mine[i] = value(rank(), i);
  DeviceVector<float> dsend(mine);
  DeviceVector<float> dapart(std::vector<float>(count * world(), -1.0f));
  DeviceVector<float> din_place(in_place);
  absl::Status s = comm_->all_gather(dsend.get(), dapart.get(), count, CommType::kF32)->wait();
  ASSERT_TRUE(s.ok()) << s;
  s = comm_->all_gather(din_place.get() + rank() * count, din_place.get(), count, CommType::kF32)->wait();
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> apart = dapart.host();
  in_place = din_place.host();
  for (int r = 0; r < world(); ++r) {
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(apart[r * count + i], value(r, i)) << "rank " << r << " element " << i;
      ASSERT_EQ(in_place[r * count + i], value(r, i)) << "rank " << r << " element " << i;
    }
  }
}

TEST_F(Nccl, BroadcastCopiesTheRootsBuffer) {
  const int64_t count = 77;
  const int root = world() - 1;
  std::vector<float> buf(count);
  for (int64_t i = 0; i < count; ++i) buf[i] = value(rank(), i);
  DeviceVector<float> dbuf(buf);
  absl::Status s = comm_->broadcast(dbuf.get(), count, CommType::kF32, root)->wait();
  ASSERT_TRUE(s.ok()) << s;
  buf = dbuf.host();
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(buf[i], value(root, i)) << "element " << i;
}

TEST_F(Nccl, RefusesToAverageIntegersAndStaysUsable) {
  DeviceVector<int64_t> d(std::vector<int64_t>{3});
  EXPECT_EQ(comm_->all_reduce(d.get(), 1, CommType::kI64, ReduceOp::kAvg)->wait().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = comm_->all_reduce(d.get(), 1, CommType::kI64, ReduceOp::kSum)->wait();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(d.host()[0], 3 * world());
}

#else

TEST(Nccl, NeedsABuildWithNccl) {
  GTEST_SKIP() << "no CUDA device: this build has no NCCL communicator (ZEROD_WITH_NCCL is off)";
}

#endif

}  // namespace
}  // namespace zerod
