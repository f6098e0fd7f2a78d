#include "runtime/checkpoint/checkpoint_dir.h"

#include <signal.h>
#include <cerrno>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/core/crc32c.h"
#include "tests/temp_dir.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

class CheckpointDirTest : public testing::TempDirTest {
 protected:
  std::string root() const { return path("ckpt"); }

  // A whole save of `step` with one file holding `content`.
  void save(int64_t step, const std::string& content, int keep) {
    auto tmp = begin_checkpoint(root(), step);
    ASSERT_TRUE(tmp.ok()) << tmp.status();
    auto crc = write_file_durably(*tmp + "/rank-0.bin", content.data(), content.size());
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(*crc, crc32c(content.data(), content.size()));
    ASSERT_TRUE(commit_checkpoint(root(), step).ok());
    ASSERT_TRUE(prune_checkpoints(root(), keep).ok());
  }

  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

// A durable write goes on after a short write or an interrupted one, and
// stops at a failure naming the file and the offset; a file that cannot be
// created is named too. The faults come through the hook, as from the kernel.
TEST_F(CheckpointDirTest, DurableWritesResumeShortWritesAndNameFailures) {
  std::string data(3 * 4096 + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 % 253);
  std::vector<std::pair<uint64_t, uint32_t>> seen;  // offset, bytes asked
  int call = 0;
  IoFaultHook faults;
  faults.on_complete = [&](bool write, const std::string&, uint64_t offset, uint32_t len, int result) {
    EXPECT_TRUE(write);
    seen.emplace_back(offset, len);
    switch (call++) {
      case 0: return result / 3;  // short
      case 1: return -EINTR;
      default: return result;
    }
  };
  const std::string file = path("whole");
  auto crc = write_file_durably(file, data.data(), data.size(), &faults);
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_EQ(*crc, crc32c(data.data(), data.size()));
  const uint64_t third = data.size() / 3;
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, uint32_t>>{
                      {0, data.size()}, {third, data.size() - third}, {third, data.size() - third}}));
  std::ifstream in(file, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), data);

  call = 0;
  faults.on_complete = [&](bool, const std::string&, uint64_t, uint32_t, int) {
    return call++ == 0 ? 4096 : -ENOSPC;
  };
  const absl::Status full = write_file_durably(path("full"), data.data(), data.size(), &faults).status();
  EXPECT_NE(full.message().find("cannot write at offset 4096 of " + path("full")), std::string::npos) << full;
  EXPECT_NE(full.message().find("No space left on device"), std::string::npos) << full;

  faults.on_open = [](const std::string&, int) { return EACCES; };
  const absl::Status refused = write_file_durably(path("refused"), data.data(), data.size(), &faults).status();
  EXPECT_NE(refused.message().find("cannot create " + path("refused") + ": Permission denied"), std::string::npos)
      << refused;
  EXPECT_FALSE(fs::exists(path("refused")));
}

TEST_F(CheckpointDirTest, CommitPublishesTheDirectoryAndPointsLatestAtIt) {
  save(1200, "abc", 3);
  EXPECT_EQ(checkpoint_dir_name(1200), "step-00001200");
  auto latest = latest_checkpoint(root());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, root() + "/step-00001200");
  EXPECT_EQ(read(*latest + "/rank-0.bin"), "abc");
  EXPECT_EQ(read(root() + "/latest"), "step-00001200\n");
  EXPECT_FALSE(fs::exists(root() + "/step-00001200.tmp"));
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({1200}));
}

TEST_F(CheckpointDirTest, KeepsOnlyTheNewest) {
  for (int64_t s : {10, 20, 30, 40}) save(s, "x", 2);
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({30, 40}));
  EXPECT_EQ(*latest_checkpoint(root()), root() + "/step-00000040");
  // A latest older than the rest (a run resumed from an earlier step) stays.
  save(20, "y", 1);
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({20, 40}));
  EXPECT_EQ(*latest_checkpoint(root()), root() + "/step-00000020");
}

TEST_F(CheckpointDirTest, AnUnfinishedSaveLeavesTheLatestCheckpointAlone) {
  save(10, "ten", 2);
  auto tmp = begin_checkpoint(root(), 20);
  ASSERT_TRUE(tmp.ok());
  ASSERT_TRUE(write_file_durably(*tmp + "/rank-0.bin", "tw", 2).ok());
  // The process dies here: no commit.
  EXPECT_EQ(*latest_checkpoint(root()), root() + "/step-00000010");
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({10}));
  // The next attempt at step 20 starts from an empty directory.
  tmp = begin_checkpoint(root(), 20);
  ASSERT_TRUE(tmp.ok());
  EXPECT_TRUE(fs::is_empty(*tmp));
}

TEST_F(CheckpointDirTest, SavingAStepAgainReplacesIt) {
  save(10, "old", 2);
  save(10, "new", 2);
  EXPECT_EQ(read(*latest_checkpoint(root()) + "/rank-0.bin"), "new");
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({10}));
  EXPECT_EQ(std::distance(fs::directory_iterator(root()), fs::directory_iterator()), 2);  // step-00000010, latest
}

TEST_F(CheckpointDirTest, RefusesARootThatIsNotADirectory) {
  write("file", "x");
  auto s = begin_checkpoint(path("file"), 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not a directory"), std::string::npos) << s.status();
  s = begin_checkpoint(path("file") + "/sub", 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path("file")), std::string::npos) << s.status();
  EXPECT_EQ(read(path("file")), "x");
}

TEST_F(CheckpointDirTest, RefusesABadKeepAndACommitWithoutASave) {
  save(10, "x", 1);
  EXPECT_EQ(commit_checkpoint(root(), 20).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(prune_checkpoints(root(), 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*latest_checkpoint(root()), root() + "/step-00000010");
  EXPECT_EQ(*list_checkpoints(root()), std::vector<int64_t>({10}));
}

TEST_F(CheckpointDirTest, ABrokenLatestIsReportedNotFollowed) {
  fs::create_directories(root());
  EXPECT_EQ(latest_checkpoint(root()).status().code(), absl::StatusCode::kNotFound);
  write("ckpt/latest", "../etc\n");
  auto s = latest_checkpoint(root());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("not a checkpoint"), std::string::npos) << s.status();
  write("ckpt/latest", "step-00000007\n");
  s = latest_checkpoint(root());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("missing"), std::string::npos) << s.status();
}

TEST_F(CheckpointDirTest, WriteErrorsNameTheFile) {
  auto s = write_file_durably(path("no/such/dir/f.bin"), "x", 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path("no/such/dir/f.bin")), std::string::npos) << s.status();
  // A full device: /dev/full refuses every write with ENOSPC.
  if (fs::exists("/dev/full")) {
    s = write_file_durably("/dev/full", "x", 1);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("/dev/full"), std::string::npos) << s.status();
  }
}

// Where the filesystem cannot swap directories (RENAME_EXCHANGE refused
// through the hook), saving a step that is already there is killed before
// each rename of its commit: `latest` names a whole checkpoint every time,
// the old one until the new one is whole under step-N.new, then the new.
// The next save of that step, from whatever was left, ends with step-N
// alone (no .new or .old beside it).
TEST_F(CheckpointDirTest, WithoutRenameExchangeAKillAtAnyRenameLeavesLatestWhole) {
  const std::string old_c(64 << 10, 'o'), new_c(64 << 10, 'n'), next_c(64 << 10, 'x');
  int renames = 0, kill_at = -1;
  IoFaultHook faults;
  faults.on_rename = [&](const std::string&, const std::string&, bool exchange) {
    if (exchange) return EINVAL;
    if (renames++ == kill_at) raise(SIGKILL);
    return 0;
  };
  const auto save_again = [&](const std::string& content) {
    auto tmp = begin_checkpoint(root(), 7);
    return tmp.ok() && write_file_durably(*tmp + "/rank-0.bin", content.data(), content.size()).ok() &&
           commit_checkpoint(root(), 7, &faults).ok();
  };
  // The renames: step-7.tmp -> .new, step-7 -> .old, .new -> step-7, latest.tmp -> latest.
  for (kill_at = 0; kill_at <= 4; ++kill_at) {
    SCOPED_TRACE(::testing::Message() << "killed before rename " << kill_at);
    fs::remove_all(root());
    save(7, old_c, 3);
    renames = 0;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(save_again(new_c) ? 0 : 3);
    int status = 0;
    waitpid(pid, &status, 0);
    if (kill_at < 4) {
      ASSERT_TRUE(WIFSIGNALED(status)) << status;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    auto latest = latest_checkpoint(root());
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(read(*latest + "/rank-0.bin"), kill_at <= 1 ? old_c : new_c) << *latest;

    renames = 0;
    const int saved_kill_at = kill_at;
    kill_at = -1;
    ASSERT_TRUE(save_again(next_c));
    kill_at = saved_kill_at;
    latest = latest_checkpoint(root());
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, root() + "/step-00000007");
    EXPECT_EQ(read(*latest + "/rank-0.bin"), next_c);
    EXPECT_FALSE(fs::exists(root() + "/step-00000007.new"));
    EXPECT_FALSE(fs::exists(root() + "/step-00000007.old"));
  }
}

// A process saving checkpoints in a loop is killed at random points, again
// and again: `latest` always names a checkpoint whose files are whole.
TEST_F(CheckpointDirTest, KilledAtRandomPointsOfSavesLatestIsAlwaysWhole) {
  const auto content = [](int64_t step, char file) { return std::string(64 << 10, static_cast<char>(step * 3 + file)); };
  std::mt19937 rng(9);
  int64_t next = 1;
  int saw_latest = 0;
  for (int round = 0; round < 25; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t step = next;; ++step) {
        auto tmp = begin_checkpoint(root(), step);
        if (!tmp.ok()) _exit(3);
        for (char f : {'a', 'b'}) {
          const std::string c = content(step, f);
          if (!write_file_durably(*tmp + "/" + f + ".bin", c.data(), c.size()).ok()) _exit(4);
        }
        if (!commit_checkpoint(root(), step).ok() || !prune_checkpoints(root(), 2).ok()) _exit(5);
      }
    }
    usleep(std::uniform_int_distribution<int>(0, 20000)(rng));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saver stopped by itself, status " << status;
    auto latest = latest_checkpoint(root());
    if (!latest.ok()) {
      ASSERT_EQ(latest.status().code(), absl::StatusCode::kNotFound) << latest.status();
      continue;
    }
    ++saw_latest;
    const int64_t step = std::stoll(fs::path(*latest).filename().string().substr(5));
    for (char f : {'a', 'b'}) {
      ASSERT_EQ(read(*latest + "/" + f + ".bin"), content(step, f)) << *latest << " " << f;
    }
    next = step + 1;
  }
  EXPECT_GT(saw_latest, 0);
}

}  // namespace
}  // namespace zerod
