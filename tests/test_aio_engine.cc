#include "offload/aio_engine.h"

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using testing::TempDirTest;

Buffer aligned(uint64_t bytes) { return *Buffer::allocate(bytes, Category::kOffload); }

void fill_random(Buffer& b, uint32_t seed) {
  std::mt19937 rng(seed);
  for (uint64_t i = 0; i < b.bytes() / 4; ++i) b.host<uint32_t>()[i] = rng();
}

bool same(const Buffer& a, const Buffer& b) { return std::memcmp(a.data(), b.data(), a.bytes()) == 0; }

std::unique_ptr<AioEngine> engine(int64_t block, int depth, IoFaultHook hook = {}) {
  auto e = AioEngine::create({block, depth}, std::move(hook));
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(e).value();
}

class AioEngineTest : public TempDirTest {};

TEST_F(AioEngineTest, ReadsWhatAPlainWriteWrote) {
  // 3 blocks and a partial one, with several requests in flight.
  const uint64_t bytes = 3 * 65536 + 8192;
  Buffer expect = aligned(bytes), got = aligned(bytes);
  fill_random(expect, 1);
  const std::string p = path("plain.bin");
  std::ofstream(p, std::ios::binary).write(expect.host<char>(), bytes);
  auto e = engine(65536, 2);
  auto f = e->open_read(p);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(e->direct(*f));
  ASSERT_TRUE(e->wait(e->read(*f, 0, got.data(), bytes)).ok());
  EXPECT_TRUE(same(expect, got));
  // A read from the middle.
  Buffer part = aligned(8192);
  ASSERT_TRUE(e->wait(e->read(*f, 65536, part.data(), 8192)).ok());
  EXPECT_EQ(std::memcmp(part.data(), expect.host<char>() + 65536, 8192), 0);
}

TEST_F(AioEngineTest, ConcurrentTransfersRoundTripThroughAScratchFile) {
  const uint64_t region = 5 * 16384 + 4096;
  const int regions = 6;
  std::vector<Buffer> out, in;
  for (int i = 0; i < regions; ++i) {
    out.push_back(aligned(region));
    in.push_back(aligned(region));
    fill_random(out.back(), 10 + i);
  }
  auto e = engine(16384, 3);
  auto f = e->create_scratch(path("scratch.bin"), regions * region);
  ASSERT_TRUE(f.ok()) << f.status();
  // Unlinked at once: no file is left behind.
  EXPECT_FALSE(std::filesystem::exists(path("scratch.bin")));
  std::vector<AioEngine::Ticket> writes;
  for (int i = 0; i < regions; ++i) writes.push_back(e->write(*f, i * region, out[i].data(), region));
  for (auto& t : writes) ASSERT_TRUE(e->wait(t).ok());
  std::vector<AioEngine::Ticket> reads;
  for (int i = regions - 1; i >= 0; --i) reads.push_back(e->read(*f, i * region, in[i].data(), region));
  for (auto& t : reads) ASSERT_TRUE(e->wait(t).ok());
  for (int i = 0; i < regions; ++i) EXPECT_TRUE(same(out[i], in[i])) << "region " << i;
}

TEST_F(AioEngineTest, ShortReadsAndWritesAreResubmittedForTheRest) {
  // Every first completion of a request reports only its first page done.
  std::atomic<int> shortened{0};
  IoFaultHook hook;
  hook.on_complete = [&](bool, const std::string&, uint64_t offset, uint32_t len, int result) {
    if (len > 4096 && offset % 32768 == 0) {
      ++shortened;
      return 4096;
    }
    return result;
  };
  const uint64_t bytes = 4 * 32768;
  Buffer out = aligned(bytes), in = aligned(bytes);
  fill_random(out, 3);
  auto e = engine(32768, 2, hook);
  auto f = e->create_scratch(path("s.bin"), bytes);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(e->wait(e->write(*f, 0, out.data(), bytes)).ok());
  EXPECT_EQ(shortened.load(), 4);
  ASSERT_TRUE(e->wait(e->read(*f, 0, in.data(), bytes)).ok());
  EXPECT_EQ(shortened.load(), 8);
  EXPECT_TRUE(same(out, in));
}

TEST_F(AioEngineTest, ErrorsNameTheFileAndOffset) {
  const uint64_t bytes = 8 * 8192;
  Buffer b = aligned(bytes);
  fill_random(b, 4);
  struct Case {
    const char* what;
    bool on_write;
    std::function<int(uint64_t offset, uint32_t len, int result)> fault;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"disk full", true, [](uint64_t o, uint32_t, int r) { return o == 3 * 8192 ? -ENOSPC : r; },
       absl::StatusCode::kResourceExhausted, "write of 8192 bytes at offset 24576"},
      {"short write, then disk full", true,
       [](uint64_t o, uint32_t, int r) { return o == 5 * 8192 ? 4096 : o == 5 * 8192 + 4096 ? -ENOSPC : r; },
       absl::StatusCode::kResourceExhausted, "write of 4096 bytes at offset 45056"},
      {"EIO on read", false, [](uint64_t o, uint32_t, int r) { return o == 6 * 8192 ? -EIO : r; },
       absl::StatusCode::kUnknown, "read of 8192 bytes at offset 49152"},
      {"end of file on read", false, [](uint64_t o, uint32_t, int r) { return o == 8192 ? 0 : r; },
       absl::StatusCode::kDataLoss, "hit the end of the file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    IoFaultHook hook;
    hook.on_complete = [&](bool write, const std::string&, uint64_t o, uint32_t len, int r) {
      return write == c.on_write ? c.fault(o, len, r) : r;
    };
    auto e = engine(8192, 4, hook);
    const std::string p = path(absl::StrCat("f", &c - cases));
    auto f = e->create_scratch(p, bytes);
    ASSERT_TRUE(f.ok());
    absl::Status s = e->wait(e->write(*f, 0, b.data(), bytes));
    if (!c.on_write) {
      ASSERT_TRUE(s.ok()) << s;
      s = e->wait(e->read(*f, 0, b.data(), bytes));
    }
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_NE(s.message().find(p), std::string::npos) << s;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
    // The engine goes on working after a failed transfer.
    if (c.on_write) {
      EXPECT_TRUE(e->wait(e->write(*f, 0, b.data(), 8192)).ok());
    }
  }
}

TEST_F(AioEngineTest, FallsBackToBufferedIoWhereDirectIoIsRefused) {
  IoFaultHook hook;
  hook.on_open = [](const std::string&, int flags) { return (flags & O_DIRECT) ? EINVAL : 0; };
  auto e = engine(4096, 2, hook);
  ::testing::internal::CaptureStderr();
  auto f = e->create_scratch(path("b.bin"), 0);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(e->direct(*f));
  EXPECT_NE(err.find("refuses direct I/O; using buffered I/O"), std::string::npos) << err;
  // Buffered files take any offset and size.
  const char msg[] = "unaligned bytes";
  char back[sizeof msg] = {};
  ASSERT_TRUE(e->wait(e->write(*f, 3, msg, sizeof msg)).ok());
  ASSERT_TRUE(e->wait(e->read(*f, 3, back, sizeof msg)).ok());
  EXPECT_STREQ(back, msg);
}

TEST_F(AioEngineTest, RefusesBadSettingsPathsAndTransfers) {
  EXPECT_EQ(AioEngine::create({1000, 8}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AioEngine::create({4096, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  auto e = engine(4096, 2);
  EXPECT_EQ(e->open_read(path("missing")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e->create_scratch(path("no/such/dir/x"), 4096).status().code(), absl::StatusCode::kNotFound);
  write("taken", "x");
  EXPECT_EQ(e->create_scratch(path("taken"), 4096).status().code(), absl::StatusCode::kAlreadyExists);
  // More space than any disk has: refused when the file is made, not later.
  auto huge = e->create_scratch(path("huge"), uint64_t{1} << 60);
  EXPECT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find(path("huge")), std::string::npos) << huge.status();
  auto f = e->create_scratch(path("ok"), 8192);
  ASSERT_TRUE(f.ok());
  Buffer b = aligned(8192);
  absl::Status s = e->wait(e->write(*f, 100, b.data(), 4096));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not aligned"), std::string::npos) << s;
  EXPECT_EQ(e->wait(e->write(*f, 0, b.host<char>() + 64, 4096)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(AioEngineTest, LeavesNoThreadOrDescriptorBehind) {
  const int fds = testing::count_proc_entries("/proc/self/fd"), threads = testing::count_proc_entries("/proc/self/task");
  {
    IoFaultHook hook;
    hook.on_complete = [](bool, const std::string&, uint64_t o, uint32_t, int r) { return o == 8192 ? -EIO : r; };
    Buffer b = aligned(65536);  // outlives the engine, which finishes its transfers
    auto e = engine(4096, 4, hook);
    EXPECT_EQ(testing::count_proc_entries("/proc/self/task"), threads + 1);
    auto f = e->create_scratch(path("x"), 65536);
    ASSERT_TRUE(f.ok());
    // A failing transfer and a good one, both still in flight at destruction.
    e->write(*f, 0, b.data(), 65536);
    e->write(*f, 0, b.data(), 4096);
  }
  EXPECT_EQ(testing::count_proc_entries("/proc/self/fd"), fds);
  EXPECT_EQ(testing::count_proc_entries("/proc/self/task"), threads);
}

}  // namespace
}  // namespace zerod
