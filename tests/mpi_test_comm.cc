// The communicator's collectives on every rank of an mpirun world, against
// results each rank computes with plain loops from what every rank sent.
// Values are small integers, so float sums are exact and compared exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "runtime/core/dtype.h"
#include "tests/mpi_world.h"

namespace zerod {
namespace {

using testing::world;

// What rank r contributes at element i.
float value(int r, int64_t i) { return static_cast<float>((r + 1) * 3 + i % 17); }

TEST(Comm, AllReduceSumAvgMaxOverEveryRank) {
  Communicator& c = world();
  const int n = c.world_size();
  const int64_t count = 1001;  // not a multiple of anything
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    SCOPED_TRACE(reduce_op_name(op));
    std::vector<float> f(count);
    std::vector<double> d(count);
    for (int64_t i = 0; i < count; ++i) d[i] = f[i] = value(c.rank(), i);
    ASSERT_TRUE(all_reduce(c, f.data(), count, CommType::kF32, op).ok());
    ASSERT_TRUE(all_reduce(c, d.data(), count, CommType::kF64, op).ok());
    for (int64_t i = 0; i < count; ++i) {
      double sum = 0, mx = -1e30;
      for (int r = 0; r < n; ++r) {
        sum += value(r, i);
        mx = std::max<double>(mx, value(r, i));
      }
      const double want = op == ReduceOp::kSum ? sum : op == ReduceOp::kAvg ? sum / n : mx;
      ASSERT_EQ(f[i], static_cast<float>(want)) << "element " << i;
      ASSERT_EQ(d[i], want) << "element " << i;
    }
  }
  std::vector<int64_t> counts = {c.rank() + 1};
  ASSERT_TRUE(all_reduce(c, counts.data(), 1, CommType::kI64, ReduceOp::kSum).ok());
  EXPECT_EQ(counts[0], int64_t(n) * (n + 1) / 2);
}

TEST(Comm, ReduceScatterGivesEachRankItsBlock) {
  Communicator& c = world();
  const int n = c.world_size();
  const int64_t count = 333;
  std::vector<float> send(count * n), recv(count, -1.0f);
  for (int64_t i = 0; i < count * n; ++i) send[i] = value(c.rank(), i);
  ASSERT_TRUE(c.reduce_scatter(send.data(), recv.data(), count, CommType::kF32, ReduceOp::kSum)->wait().ok());
  for (int64_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += value(r, c.rank() * count + i);
    ASSERT_EQ(recv[i], want) << "element " << i;
  }
}

TEST(Comm, AllGatherInPlaceAndFromASeparateBuffer) {
  Communicator& c = world();
  const int n = c.world_size();
  const int64_t count = 129;
  // bf16 blocks: gathers move bytes, whatever the type.
  std::vector<float> mine(count);
  for (int64_t i = 0; i < count; ++i) mine[i] = value(c.rank(), i);
  std::vector<uint16_t> send(count), apart(count * n), in_place(count * n);
  convert_from_f32(DType::kBF16, mine.data(), send.data(), count);
  std::copy(send.begin(), send.end(), in_place.begin() + c.rank() * count);
  ASSERT_TRUE(c.all_gather(send.data(), apart.data(), count, CommType::kBF16)->wait().ok());
  ASSERT_TRUE(c.all_gather(in_place.data() + c.rank() * count, in_place.data(), count, CommType::kBF16)->wait().ok());
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      std::vector<float> expect = {value(r, i)};
      uint16_t bits = 0;
      convert_from_f32(DType::kBF16, expect.data(), &bits, 1);
      ASSERT_EQ(apart[r * count + i], bits) << "rank " << r << " element " << i;
      ASSERT_EQ(in_place[r * count + i], bits) << "rank " << r << " element " << i;
    }
  }
}

TEST(Comm, BroadcastFromEveryRoot) {
  Communicator& c = world();
  for (int root = 0; root < c.world_size(); ++root) {
    std::vector<double> buf(77, c.rank() == root ? 1.5 * root : -1.0);
    ASSERT_TRUE(c.broadcast(buf.data(), 77, CommType::kF64, root)->wait().ok());
    for (double x : buf) ASSERT_EQ(x, 1.5 * root);
  }
  EXPECT_TRUE(c.barrier()->wait().ok());
}

TEST(Comm, OperationsInFlightTogetherCompleteInOrderWhileTheCallerComputes) {
  Communicator& c = world();
  const int n = c.world_size();
  std::vector<std::vector<float>> bufs(8, std::vector<float>(4096));
  std::vector<WorkPtr> works;
  for (size_t k = 0; k < bufs.size(); ++k) {
    for (float& x : bufs[k]) x = static_cast<float>(c.rank() + k);
    works.push_back(c.all_reduce(bufs[k].data(), 4096, CommType::kF32, ReduceOp::kSum));
  }
  // The caller goes on with its own work; the collectives run meanwhile.
  double busy = 0;
  for (int i = 0; i < 1000000; ++i) busy += i * 1e-9;
  EXPECT_GT(busy, 0);
  // Waited on out of issue order: each still holds its own result.
  for (size_t k = bufs.size(); k-- > 0;) {
    ASSERT_TRUE(works[k]->wait().ok());
    ASSERT_TRUE(works[k]->wait().ok());  // a second wait is harmless
    const float want = static_cast<float>(n * (n - 1) / 2 + n * k);
    for (float x : bufs[k]) ASSERT_EQ(x, want);
  }
}

TEST(Comm, ReductionsOf16BitBuffersAreRefused) {
  Communicator& c = world();
  std::vector<uint16_t> buf(8, 0);
  const absl::Status s = c.all_reduce(buf.data(), 8, CommType::kBF16, ReduceOp::kSum)->wait();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

TEST(Comm, AStalledRankIsNamedWhenTheTimeoutPasses) {
  // A communicator of its own with a 1 s timeout. Rank 1 reaches the second
  // collective 1.5 s late; every other rank's wait fails at 1 s naming it,
  // and the late collective still completes so all ranks shut down cleanly.
  Communicator& w = world();
  ASSERT_GE(w.world_size(), 2) << "run this test with at least two ranks";
  auto made = make_mpi_communicator(std::chrono::milliseconds(1000));
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Communicator> c = std::move(*made);
  double x = 1;
  ASSERT_TRUE(all_reduce(*c, &x, 1, CommType::kF64, ReduceOp::kSum).ok());
  if (c->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = all_reduce(*c, &x, 1, CommType::kF64, ReduceOp::kSum);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (c->rank() == 1) {
    EXPECT_TRUE(s.ok()) << s;  // everyone else had arrived
  } else {
    ASSERT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    const std::string m(s.message());
    EXPECT_NE(m.find("all_reduce #2"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 (last reached #1)"), std::string::npos) << m;
    EXPECT_EQ(m.find("rank 0 ("), std::string::npos) << m;
    EXPECT_GE(waited, 0.9);
    // The communicator is broken from now on.
    EXPECT_FALSE(all_reduce(*c, &x, 1, CommType::kF64, ReduceOp::kSum).ok());
  }
  c.reset();
  EXPECT_TRUE(w.barrier()->wait().ok());
}

}  // namespace
}  // namespace zerod
