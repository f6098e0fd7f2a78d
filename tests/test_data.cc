#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/dataset.h"
#include "runtime/data/synthetic_task.h"
#include "runtime/data/token_shard.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

class DataTest : public testing::TempDirTest {};

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

void put_le32(std::string& out, int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

// An llm.c shard's header built by hand: [magic, version, count, 0...].
std::string shard_header(int32_t magic, int32_t version, int32_t count) {
  std::string out;
  put_le32(out, magic);
  put_le32(out, version);
  put_le32(out, count);
  for (int i = 3; i < 256; ++i) put_le32(out, 0);
  return out;
}

// A shard of 16-bit ids built by hand.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::string out = shard_header(magic, version, count);
  for (uint16_t t : tokens) {
    out.push_back(static_cast<char>(t & 0xff));
    out.push_back(static_cast<char>(t >> 8));
  }
  return out;
}

std::string good_shard(const std::vector<uint16_t>& tokens) {
  return shard_bytes(20240520, 1, static_cast<int32_t>(tokens.size()), tokens);
}

// Every id of a stream, read through it.
std::vector<uint32_t> ids_of(const TokenStream& s) {
  std::vector<uint32_t> ids(s.size());
  s.read(0, s.size(), ids.data());
  return ids;
}

// 16-bit ids as a reader widens them.
std::vector<uint32_t> widened(const std::vector<uint16_t>& ids) { return {ids.begin(), ids.end()}; }

// An llm.c shard of 32-bit ids built by hand.
std::string shard32_bytes(int32_t version, int32_t count, const std::vector<uint32_t>& tokens) {
  std::string out = shard_header(20240801, version, count);
  for (uint32_t t : tokens) put_le32(out, static_cast<int32_t>(t));
  return out;
}

void expect_contains(const absl::Status& s, const std::string& fragment) {
  EXPECT_NE(std::string(s.message()).find(fragment), std::string::npos) << "'" << fragment << "' not in: " << s;
}

void expect_error(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& fragments) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& f : fragments) expect_contains(s, f);
}

// ---- token shards ----

TEST_F(DataTest, ShardWriteReadRoundTrip) {
  std::vector<uint16_t> tokens = {0, 1, 255, 256, 1000, 50256, 65535};
  for (int i = 0; i < 5000; ++i) tokens.push_back(static_cast<uint16_t>(i * 7919));
  ASSERT_TRUE(write_token_shard(path("a.bin"), tokens).ok());
  EXPECT_FALSE(fs::exists(path("a.bin.tmp")));
  auto back = read_token_shard(path("a.bin"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, widened(tokens));
}

TEST_F(DataTest, ShardMatchesHandBuiltBytes) {
  const std::vector<uint16_t> tokens = {1, 258, 65535, 0};
  const std::string bytes = shard_bytes(20240520, 1, 4, tokens);
  ASSERT_EQ(bytes.size(), 1024u + 8u);
  write_file(path("hand.bin"), bytes);
  auto parsed = read_token_shard(path("hand.bin"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, widened(tokens));

  // The writer produces exactly these bytes.
  ASSERT_TRUE(write_token_shard(path("written.bin"), tokens).ok());
  EXPECT_EQ(testing::read_file(path("written.bin")), bytes);
}

TEST_F(DataTest, EmptyShardIsValid) {
  write_file(path("empty.bin"), good_shard({}));
  auto parsed = read_token_shard(path("empty.bin"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->empty());
}

TEST_F(DataTest, FailedWriteLeavesNoFile) {
  // `path` is a non-empty directory, so the final rename must fail.
  fs::create_directories(path("target.bin/inside"));
  absl::Status s = write_token_shard(path("target.bin"), {1, 2, 3});
  EXPECT_FALSE(s.ok());
  expect_contains(s, path("target.bin"));
  EXPECT_TRUE(fs::is_directory(path("target.bin")));
  EXPECT_FALSE(fs::exists(path("target.bin.tmp")));
}

TEST_F(DataTest, ShardMissingFile) {
  expect_error(read_token_shard(path("nope.bin")).status(), absl::StatusCode::kNotFound,
               {path("nope.bin"), "No such file"});
}

TEST_F(DataTest, ShardShorterThanHeader) {
  write_file(path("short.bin"), std::string(100, '\0'));
  expect_error(read_token_shard(path("short.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("short.bin"), "only 100 bytes", "1024-byte", "header"});
}

TEST_F(DataTest, ShardWrongMagic) {
  write_file(path("magic.bin"), shard_bytes(12345, 1, 2, {7, 8}));
  expect_error(read_token_shard(path("magic.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("magic.bin"), "bad magic 12345", "expected 20240520"});
}

TEST_F(DataTest, ShardWrongVersion) {
  write_file(path("version.bin"), shard_bytes(20240520, 2, 2, {7, 8}));
  expect_error(read_token_shard(path("version.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("version.bin"), "version 2", "expected 1"});
}

TEST_F(DataTest, ShardNegativeCount) {
  write_file(path("neg.bin"), shard_bytes(20240520, 1, -3, {}));
  expect_error(read_token_shard(path("neg.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("neg.bin"), "negative token count -3"});
}

TEST_F(DataTest, ShardTruncated) {
  write_file(path("trunc.bin"), shard_bytes(20240520, 1, 10, {1, 2, 3, 4, 5}));
  expect_error(read_token_shard(path("trunc.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("trunc.bin"), "truncated", "10 tokens", "1044 bytes expected", "has 1034"});
}

TEST_F(DataTest, ShardTrailingBytes) {
  write_file(path("trail.bin"), shard_bytes(20240520, 1, 2, {1, 2, 3}));
  expect_error(read_token_shard(path("trail.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("trail.bin"), "trailing bytes", "1028 bytes expected", "has 1030"});
}

// llm.c's shards of 32-bit ids (magic 20240801, version 7), for
// vocabularies past 65536: written and read back, byte for byte as built
// by hand, and their header's errors.
TEST_F(DataTest, Shard32WriteReadAndHandBuiltBytes) {
  const std::vector<uint32_t> tokens = {0, 1, 65535, 65536, 70000, 128255, 0xFFFFFFFFu};
  const std::string bytes = shard32_bytes(7, static_cast<int32_t>(tokens.size()), tokens);
  ASSERT_EQ(bytes.size(), 1024u + 4 * tokens.size());
  ASSERT_TRUE(write_token_shard32(path("wide.bin"), tokens).ok());
  EXPECT_FALSE(fs::exists(path("wide.bin.tmp")));
  EXPECT_EQ(testing::read_file(path("wide.bin")), bytes);
  auto back = read_token_shard(path("wide.bin"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, tokens);
}

TEST_F(DataTest, Shard32HeaderErrors) {
  write_file(path("version.bin"), shard32_bytes(1, 2, {7, 8}));
  expect_error(read_token_shard(path("version.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("version.bin"), "unsupported version 1", "expected 7 for magic 20240801"});
  write_file(path("trunc.bin"), shard32_bytes(7, 10, {1, 2, 3, 4, 5}));
  expect_error(read_token_shard(path("trunc.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("trunc.bin"), "truncated", "10 tokens of 4 bytes", "1064 bytes expected", "has 1044"});
  // Ids of 16 bits under the wide magic: the size gives it away.
  write_file(path("narrow.bin"), shard_bytes(20240801, 7, 4, {1, 2, 3, 4}));
  expect_error(read_token_shard(path("narrow.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("narrow.bin"), "truncated", "1040 bytes expected", "has 1032"});
  write_file(path("magic.bin"), shard_bytes(12345, 1, 2, {7, 8}));
  expect_error(read_token_shard(path("magic.bin")).status(), absl::StatusCode::kInvalidArgument,
               {"bad magic 12345", "expected 20240520 or 20240801"});
}

// Shards of both widths make one stream, in path order; ids past 65535 are
// checked against the vocabulary like any other, naming the file and place;
// the loader's windows carry them whole.
TEST_F(DataTest, ShardsOfBothWidthsMakeOneStream) {
  std::vector<uint32_t> wide;
  for (uint32_t i = 0; i < 300; ++i) wide.push_back(65000 + 311 * i % 63000);
  ASSERT_TRUE(write_token_shard(path("a.bin"), {10, 11, 12}).ok());
  ASSERT_TRUE(write_token_shard32(path("b.bin"), wide).ok());
  ASSERT_TRUE(write_token_shard(path("c.bin"), {30, 31}).ok());
  std::vector<uint32_t> all = {10, 11, 12};
  all.insert(all.end(), wide.begin(), wide.end());
  all.insert(all.end(), {30, 31});

  const int seq_len = 8;
  DataConfig cfg{DataKind::kTokens, path("*.bin"), seq_len, 1, {}, {}};
  auto sized = dataset_tokens(cfg);
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(*sized, static_cast<int64_t>(all.size()));
  auto ds = load_dataset(cfg, 128256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ids_of(ds->tokens), all);

  // Every window the loader gives is the stream's, ids past 16 bits whole.
  auto loader = DataLoader::create(&ds->tokens, seq_len, 5);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const int64_t windows = loader->num_windows();
  std::vector<int32_t> in(seq_len), target(seq_len);
  std::set<int64_t> seen;
  for (int64_t w = 0; w < windows; ++w) {
    loader->next_batch(1, in.data(), target.data());
    const auto at = std::search(all.begin(), all.end() - 1, in.begin(), in.end(),
                                [](uint32_t a, int32_t b) { return a == static_cast<uint32_t>(b); });
    ASSERT_NE(at, all.end() - 1);
    const int64_t start = at - all.begin();
    EXPECT_EQ(start % seq_len, 0);
    seen.insert(start / seq_len);
    for (int t = 0; t < seq_len; ++t) EXPECT_EQ(static_cast<uint32_t>(target[t]), all[start + t + 1]);
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), windows);  // each window once an epoch

  expect_error(load_dataset(cfg, 50257).status(), absl::StatusCode::kInvalidArgument,
               {path("b.bin"), "token 65000 (at index 0) is >= vocab_size 50257"});
  // All four bytes of an id count.
  ASSERT_TRUE(write_token_shard32(path("d.bin"), std::vector<uint32_t>(20, 7)).ok());
  ASSERT_TRUE(write_token_shard32(path("e.bin"), {7, 7, 0x01000005u, 7}).ok());
  expect_error(load_dataset({DataKind::kTokens, path("[de].bin"), seq_len, 1, {}, {}}, 128256).status(),
               absl::StatusCode::kInvalidArgument, {path("e.bin"), "token 16777221 (at index 2)"});
}

// ---- paths ----

TEST_F(DataTest, GlobReturnsSortedFilesAndLoadConcatenatesInOrder) {
  // Created out of order; a non-matching file sits beside them.
  write_file(path("c.bin"), good_shard({30, 31}));
  write_file(path("a.bin"), good_shard({10, 11, 12}));
  write_file(path("b.bin"), good_shard({20}));
  write_file(path("notes.txt"), "not a shard");
  auto paths = expand_data_path(path("*.bin"));
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(*paths, (std::vector<std::string>{path("a.bin"), path("b.bin"), path("c.bin")}));

  DataConfig cfg{DataKind::kTokens, path("*.bin"), 2, 1, {}, {}};
  auto ds = load_dataset(cfg, 100);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ids_of(ds->tokens), (std::vector<uint32_t>{10, 11, 12, 20, 30, 31}));
  EXPECT_TRUE(ds->heldout.empty());
}

TEST_F(DataTest, PlainPathIsUsedAsIs) {
  write_file(path("one.bin"), good_shard({1}));
  auto paths = expand_data_path(path("one.bin"));
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(*paths, std::vector<std::string>{path("one.bin")});
}

TEST_F(DataTest, PlainPathMissing) {
  expect_error(expand_data_path(path("gone.bin")).status(), absl::StatusCode::kNotFound,
               {path("gone.bin"), "does not exist"});
}

TEST_F(DataTest, GlobMatchesNothing) {
  const std::string pattern = path("*.bin");
  expect_error(expand_data_path(pattern).status(), absl::StatusCode::kNotFound,
               {"data.path '" + pattern + "' matches no files"});
  DataConfig cfg{DataKind::kTokens, pattern, 2, 1, {}, {}};
  expect_error(load_dataset(cfg, 100).status(), absl::StatusCode::kNotFound, {pattern, "matches no files"});
}

// ---- load_dataset ----

TEST_F(DataTest, TextBytesBecomeTokens) {
  std::string bytes = "hello\nworld\t";
  bytes += std::string("\0\x01\x7f\x80\xfe\xff", 6);
  write_file(path("t.txt"), bytes);
  DataConfig cfg{DataKind::kText, path("t.txt"), 4, 1, {}, {}};
  auto ds = load_dataset(cfg, 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const std::vector<uint32_t> ids = ids_of(ds->tokens);
  ASSERT_EQ(ids.size(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(bytes[i])) << "byte " << i;
}

TEST_F(DataTest, EmptyTextFile) {
  write_file(path("empty.txt"), "");
  DataConfig cfg{DataKind::kText, path("empty.txt"), 4, 1, {}, {}};
  expect_error(load_dataset(cfg, 256).status(), absl::StatusCode::kInvalidArgument, {path("empty.txt"), "empty"});
}

// zerod's windowed shard: the llm.c header with its window in header[3],
// uint32 ids whose top bit says "not a target"; the window must divide the
// ids; ids are checked against the vocabulary without the flag.
TEST_F(DataTest, WindowedShardBytesAndHeaderErrors) {
  const std::vector<uint32_t> ids = {5, 6 | kNotTarget, 7, 8, 9 | kNotTarget, 10};
  ASSERT_TRUE(write_window_shard(path("w.bin"), ids, 3).ok());
  std::string bytes = shard_header(20261128, 1, 6);
  bytes.replace(12, 4, std::string("\x03\0\0\0", 4));
  for (uint32_t t : ids) put_le32(bytes, static_cast<int32_t>(t));
  EXPECT_EQ(testing::read_file(path("w.bin")), bytes);
  EXPECT_EQ(*read_token_shard(path("w.bin")), ids);
  DataConfig cfg{DataKind::kTokens, path("w.bin"), 3, 1, {}, {}};
  EXPECT_EQ(dataset_windows(cfg).value_or(-1), 2);
  auto ds = load_dataset(cfg, 11);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ds->windowed);
  expect_error(load_dataset(cfg, 10).status(), absl::StatusCode::kInvalidArgument,
               {path("w.bin"), "token 10 (at index 5)", "vocab_size 10"});

  expect_error(write_window_shard(path("odd.bin"), ids, 4), absl::StatusCode::kInvalidArgument,
               {path("odd.bin"), "6 ids are not a whole number of windows of 4"});
  EXPECT_FALSE(fs::exists(path("odd.bin")));
  bytes.replace(12, 4, std::string("\x04\0\0\0", 4));  // the file's, with another window
  write_file(path("odd.bin"), bytes);
  expect_error(read_token_shard(path("odd.bin")).status(), absl::StatusCode::kInvalidArgument,
               {path("odd.bin"), "the header's window 4 is not a positive divisor of its token count 6"});
  bytes.replace(12, 4, std::string("\0\0\0\0", 4));
  write_file(path("zero.bin"), bytes);
  expect_error(read_token_shard(path("zero.bin")).status(), absl::StatusCode::kInvalidArgument,
               {"the header's window 0 is not a positive divisor"});
  write_file(path("v.bin"), shard_header(20261128, 3, 0));  // version 2 is a packed shard's
  expect_error(read_token_shard(path("v.bin")).status(), absl::StatusCode::kInvalidArgument,
               {"unsupported version 3", "expected 1 or 2 for magic 20261128"});
}

// ---- packed windowed shards ----

constexpr uint32_t kBothFlags = kNotTarget | kDocStart;

// `windows` windows of `T` ids below 200, each a run of documents of 1 to
// T/2 ids, the window's rest an EOS (199) padding document: each document's
// first id flagged kDocStart and kNotTarget, the rest kNotTarget at random;
// document `forgot` (counted over the file) lacks kNotTarget on its first
// id, as a careless writer might leave it.
std::vector<uint32_t> packed_ids(int windows, int T, uint32_t seed, int forgot = -1) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> ids;
  int doc = 0;
  for (int w = 0; w < windows; ++w) {
    int t = 0;
    while (t < T) {
      const int room = T - t, n = std::min(room, 1 + int(rng() % (T / 2)));
      const bool pad = n == room && rng() % 3 == 0;
      for (int k = 0; k < n; ++k) {
        const uint32_t id = pad ? 199 : rng() % 199;
        if (k == 0) {
          ids.push_back(id | kDocStart | (doc == forgot ? 0 : kNotTarget));
        } else {
          ids.push_back(id | (pad || rng() % 4 == 0 ? kNotTarget : 0));
        }
      }
      t += n;
      ++doc;
    }
  }
  return ids;
}

// What the loader should make of packed window `w` of `ids`, worked out
// id by id: inputs unflagged; a target unless the next id is flagged
// either way (or past the window); a position counted back to the last
// document start at or before it.
struct Walked {
  std::vector<int32_t> inputs, targets, positions;
  int64_t targets_counted = 0;
};
Walked walk_packed_window(const std::vector<uint32_t>& ids, int64_t w, int T) {
  Walked r;
  const uint32_t* win = ids.data() + w * T;
  for (int t = 0; t < T; ++t) {
    r.inputs.push_back(int32_t(win[t] & ~kBothFlags));
    const bool target = t + 1 < T && (win[t + 1] & kNotTarget) == 0 && (win[t + 1] & kDocStart) == 0;
    r.targets.push_back(target ? int32_t(win[t + 1]) : -1);
    r.targets_counted += target;
    int s = t;
    while ((win[s] & kDocStart) == 0) --s;
    r.positions.push_back(t - s);
  }
  return r;
}

int32_t header_int(const std::string& bytes, int i) {
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= uint32_t(uint8_t(bytes[4 * i + b])) << (8 * b);
  return int32_t(v);
}

// A packed shard written and read back: version 2, the window in
// header[3], the count of document starts in header[4], the ids with their
// flags; loaded and walked, every window's inputs, targets and positions
// are what walk_packed_window works out from the written ids, a document's
// first id is never a target (even the one written without kNotTarget) and
// the count of targets is theirs.
TEST_F(DataTest, PackedShardRoundTripAndWalk) {
  const int T = 24, W = 40;
  const std::vector<uint32_t> ids = packed_ids(W, T, 7, 5);
  ASSERT_TRUE(write_window_shard(path("p.bin"), ids, T, true).ok());
  const std::string bytes = testing::read_file(path("p.bin"));
  const auto doc_starts = std::count_if(ids.begin(), ids.end(), [](uint32_t id) { return (id & kDocStart) != 0; });
  EXPECT_EQ(header_int(bytes, 0), 20261128);
  EXPECT_EQ(header_int(bytes, 1), 2);
  EXPECT_EQ(header_int(bytes, 2), W * T);
  EXPECT_EQ(header_int(bytes, 3), T);
  EXPECT_EQ(header_int(bytes, 4), doc_starts);
  EXPECT_GT(doc_starts, W);
  EXPECT_EQ(*read_token_shard(path("p.bin")), ids);

  const DataConfig cfg{DataKind::kTokens, path("p.bin"), T, 1, {}, {}};
  EXPECT_EQ(dataset_windows(cfg).value_or(-1), W);
  EXPECT_EQ(dataset_tokens(cfg).value_or(-1), W * T);
  EXPECT_TRUE(dataset_packed(cfg).value_or(false));
  auto ds = load_dataset(cfg, 200);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_TRUE(ds->windowed);
  EXPECT_TRUE(ds->packed);
  expect_error(load_dataset(cfg, 199).status(), absl::StatusCode::kInvalidArgument,
               {path("p.bin"), "token 199", "vocab_size 199"});
  auto loader = DataLoader::create(&ds->tokens, T, 3, 0, 1, MemoryAccountant::global(), true, true);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_TRUE(loader->packed());
  EXPECT_EQ(loader->num_windows(), W);

  // One epoch, 4 windows a batch; each row told apart by its inputs.
  std::vector<Walked> want;
  for (int w = 0; w < W; ++w) want.push_back(walk_packed_window(ids, w, T));
  std::set<int> seen;
  const int B = 4;
  int64_t forgot_checked = 0;
  for (int step = 0; step < W / B; ++step) {
    std::vector<int32_t> in(B * T), tg(B * T), pos(B * T, -7);
    const int64_t counted = loader->next_batch(B, in.data(), tg.data(), pos.data());
    int64_t want_counted = 0;
    for (int b = 0; b < B; ++b) {
      const std::vector<int32_t> row(in.begin() + b * T, in.begin() + (b + 1) * T);
      int w = 0;
      while (w < W && want[w].inputs != row) ++w;
      ASSERT_LT(w, W) << "a row no window holds";
      EXPECT_TRUE(seen.insert(w).second) << "window " << w << " twice in an epoch";
      EXPECT_EQ(std::vector<int32_t>(tg.begin() + b * T, tg.begin() + (b + 1) * T), want[w].targets) << w;
      EXPECT_EQ(std::vector<int32_t>(pos.begin() + b * T, pos.begin() + (b + 1) * T), want[w].positions) << w;
      want_counted += want[w].targets_counted;
      for (int t = 0; t + 1 < T; ++t) {
        const uint32_t next = ids[size_t(w) * T + t + 1];
        if ((next & kDocStart) == 0) continue;
        EXPECT_EQ(tg[b * T + t], -1) << "a document's first id is a target, window " << w << " at " << t + 1;
        forgot_checked += (next & kNotTarget) == 0;
      }
    }
    EXPECT_EQ(counted, want_counted);
  }
  EXPECT_EQ(seen.size(), size_t(W));
  EXPECT_EQ(forgot_checked, 1) << "the document written without kNotTarget on its first id, not at a window's start";
}

// Positions on unpacked data are each token's index in its window, and
// asking for them changes nothing else; a packed loader needs windowed data.
TEST_F(DataTest, UnpackedPositionsAreTheIndexInTheWindow) {
  const int T = 6, B = 3;
  std::vector<uint16_t> plain(T * 10 + 1);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = uint16_t(i % 50);
  const std::vector<uint32_t> masked = packed_ids(8, T, 2);  // flags only kNotTarget: one example a window
  std::vector<uint32_t> windowed;
  for (uint32_t id : masked) windowed.push_back(id & ~kDocStart);
  ASSERT_TRUE(write_window_shard(path("w.bin"), windowed, T).ok());
  auto ds = load_dataset({DataKind::kTokens, path("w.bin"), T, 1, {}, {}}, 200);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_FALSE(ds->packed);
  EXPECT_FALSE(dataset_packed({DataKind::kTokens, path("w.bin"), T, 1, {}, {}}).value_or(true));
  EXPECT_FALSE(dataset_packed({DataKind::kSynthetic, "", T, 1, {}, {}}).value_or(true));
  const TokenStream stream(plain);
  for (const auto& [tokens, windowed_data] :
       {std::pair<const TokenStream*, bool>{&stream, false}, {&ds->tokens, true}}) {
    DataLoader a = *DataLoader::create(tokens, T, 4, 0, 1, MemoryAccountant::global(), windowed_data);
    DataLoader b = *DataLoader::create(tokens, T, 4, 0, 1, MemoryAccountant::global(), windowed_data);
    EXPECT_FALSE(a.packed());
    for (int step = 0; step < 5; ++step) {
      std::vector<int32_t> in_a(B * T), tg_a(B * T), in_b(B * T), tg_b(B * T), pos(B * T, -7);
      EXPECT_EQ(a.next_batch(B, in_a.data(), tg_a.data()), b.next_batch(B, in_b.data(), tg_b.data(), pos.data()));
      EXPECT_EQ(in_a, in_b);
      EXPECT_EQ(tg_a, tg_b);
      for (int i = 0; i < B * T; ++i) EXPECT_EQ(pos[i], i % T);
    }
  }
  EXPECT_EQ(DataLoader::create(&stream, T, 4, 0, 1, MemoryAccountant::global(), false, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Packed shards refused, naming the file and what is wrong, nothing
// loaded: laid out for another seq_len; mixed with one-example-a-window
// shards (either way round); a window whose first id does not start a
// document; a header whose count of starts is not the file's; kDocStart
// in a one-example-a-window shard (an id past any vocabulary).
TEST_F(DataTest, PackedShardsRefusedWhenMixedOrDamaged) {
  constexpr int T = 16;
  const std::vector<uint32_t> ids = packed_ids(6, T, 9);
  ASSERT_TRUE(write_window_shard(path("a.bin"), ids, T, true).ok());
  const std::string good = testing::read_file(path("a.bin"));
  auto load = [&](const std::string& p, int seq_len = 16) {
    return load_dataset({DataKind::kTokens, path(p), seq_len, 1, {}, {}}, 200).status();
  };
  ASSERT_TRUE(load("a.bin").ok());
  EXPECT_EQ(load("a.bin", 8).message(),
            absl::StrCat("data file '", path("a.bin"),
                         "': its examples were laid out for seq_len 16, the job's data.seq_len is 8 (zeroctl "
                         "tokenize --seq-len)"));

  std::vector<uint32_t> one_a_window;
  for (uint32_t id : ids) one_a_window.push_back(id & ~kDocStart);
  ASSERT_TRUE(write_window_shard(path("b.bin"), one_a_window, T).ok());
  EXPECT_EQ(load("*.bin").message(), absl::StrCat("data file '", path("b.bin"),
                                                  "': a one-example-a-window windowed shard among packed ones; one "
                                                  "dataset holds one kind"));
  fs::rename(path("a.bin"), path("c.bin"));
  EXPECT_EQ(load("*.bin").message(),
            absl::StrCat("data file '", path("c.bin"),
                         "': a packed windowed shard among one-example-a-window ones; one dataset holds one kind"));
  fs::remove(path("b.bin"));
  fs::remove(path("c.bin"));

  // Window 3's first id without its flag, the header's count to match: the window is named.
  std::string bytes = good;
  bytes[1024 + 4 * (3 * T) + 3] &= ~0x40;  // bit 30: the top byte's 0x40
  const int32_t starts = header_int(good, 4);
  std::string header4;
  put_le32(header4, starts - 1);
  bytes.replace(16, 4, header4);
  write_file(path("d.bin"), bytes);
  expect_error(load("d.bin"), absl::StatusCode::kInvalidArgument,
               {path("d.bin"), "packed window 3 does not start a document"});

  // The header's count one more than the flags.
  bytes = good;
  header4.clear();
  put_le32(header4, starts + 1);
  bytes.replace(16, 4, header4);
  write_file(path("e.bin"), bytes);
  expect_error(load("e.bin"), absl::StatusCode::kInvalidArgument,
               {path("e.bin"),
                absl::StrCat(starts, " ids start a document, but the header's boundary table counts ", starts + 1)});
  header4.clear();
  put_le32(header4, -1);
  bytes.replace(16, 4, header4);
  write_file(path("f.bin"), bytes);
  expect_error(load("f.bin"), absl::StatusCode::kInvalidArgument,
               {path("f.bin"), "the header's count of document starts -1"});

  // kDocStart where no packed shard holds it: an id out of the vocabulary.
  ASSERT_TRUE(write_window_shard(path("g.bin"), ids, T).ok());
  expect_error(load("g.bin"), absl::StatusCode::kInvalidArgument,
               {path("g.bin"), absl::StrCat("token ", (ids[0] & ~kNotTarget), " (at index 0)")});
}

TEST_F(DataTest, TokenAtOrAboveVocabSize) {
  write_file(path("ok.bin"), good_shard({1, 2, 3, 4}));
  write_file(path("over.bin"), good_shard({5, 6, 256, 7}));
  DataConfig cfg{DataKind::kTokens, path("*.bin"), 2, 1, {}, {}};
  expect_error(load_dataset(cfg, 256).status(), absl::StatusCode::kInvalidArgument,
               {path("over.bin"), "token 256", "vocab_size 256"});
  EXPECT_TRUE(load_dataset(cfg, 257).ok());
}

TEST_F(DataTest, SyntheticTokenAboveVocabSize) {
  DataConfig cfg{DataKind::kSynthetic, "", 8, 1, {}, {}};
  expect_error(load_dataset(cfg, 40).status(), absl::StatusCode::kInvalidArgument, {"synthetic", "vocab_size 40"});
  EXPECT_TRUE(load_dataset(cfg, 64).ok());
}

TEST_F(DataTest, TextNeedsByteVocab) {
  write_file(path("t.txt"), "plain ascii text");
  DataConfig cfg{DataKind::kText, path("t.txt"), 4, 1, {}, {}};
  expect_error(load_dataset(cfg, 128).status(), absl::StatusCode::kInvalidArgument,
               {path("t.txt"), "vocab_size >= 256", "got 128"});
}

TEST_F(DataTest, TooFewTokensForOneWindow) {
  write_file(path("small.bin"), good_shard({1, 2, 3, 4, 5}));
  DataConfig cfg{DataKind::kTokens, path("small.bin"), 8, 1, {}, {}};
  expect_error(load_dataset(cfg, 100).status(), absl::StatusCode::kInvalidArgument,
               {path("small.bin"), "has 5 tokens", "seq_len+1 = 9"});
  cfg.seq_len = 4;  // exactly one window fits
  EXPECT_TRUE(load_dataset(cfg, 100).ok());
}

TEST_F(DataTest, SeqLenZero) {
  DataConfig cfg{DataKind::kSynthetic, "", 0, 1, {}, {}};
  expect_error(load_dataset(cfg, 256).status(), absl::StatusCode::kInvalidArgument, {"seq_len", "got 0"});
}

// Shards are mapped and read in place: a loader over a glob reads the same
// windows as over the ids held in one vector, across shard boundaries.
TEST_F(DataTest, WindowsAcrossMappedShardsAreTheConcatenatedStreams) {
  std::vector<uint16_t> all;
  for (int f = 0; f < 3; ++f) {
    std::vector<uint16_t> ids;
    for (int i = 0; i < 37 + 11 * f; ++i) ids.push_back(static_cast<uint16_t>(1000 * f + i));
    write_file(path("s" + std::to_string(f) + ".bin"), good_shard(ids));
    all.insert(all.end(), ids.begin(), ids.end());
  }
  write_file(path("t.txt"), "bytes of text");
  auto ds = load_dataset({DataKind::kTokens, path("s*.bin"), 7, 1, {}, {}}, 3000);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const TokenStream held(all);
  DataLoader mapped = *DataLoader::create(&ds->tokens, 7, 5), reference = *DataLoader::create(&held, 7, 5);
  for (int step = 0; step < 40; ++step) {
    std::vector<int32_t> in(3 * 7), tg(3 * 7), ref_in(3 * 7), ref_tg(3 * 7);
    mapped.next_batch(3, in.data(), tg.data());
    reference.next_batch(3, ref_in.data(), ref_tg.data());
    ASSERT_EQ(in, ref_in) << "step " << step;
    ASSERT_EQ(tg, ref_tg) << "step " << step;
  }
}

int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// A glob of 64 MiB of shards adds a few MiB to a rank's resident memory
// (pages the vocabulary check has not yet let go), not their size; a token past the
// vocabulary deep in the last one is still found, at its index in its file.
TEST_F(DataTest, ShardsAreMappedNotCopiedIntoTheRank) {
  constexpr int kShards = 4, kIds = 8 << 20;
  std::vector<uint16_t> ids(kIds);
  for (int i = 0; i < kIds; ++i) ids[i] = static_cast<uint16_t>(i % 50000);
  for (int f = 0; f < kShards; ++f) ASSERT_TRUE(write_token_shard(path("big" + std::to_string(f) + ".bin"), ids).ok());
  const int64_t before = resident_bytes();
  auto ds = load_dataset({DataKind::kTokens, path("big*.bin"), 1024, 1, {}, {}}, 50257);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const int64_t grown = resident_bytes() - before;
  EXPECT_EQ(ds->tokens.size(), int64_t{kShards} * kIds);
  EXPECT_LT(grown, 16 << 20) << "resident memory grew by " << grown << " bytes loading " << 2 * kShards * kIds;

  ids[kIds - 5] = 60000;
  ASSERT_TRUE(write_token_shard(path("big3.bin"), ids).ok());
  expect_error(load_dataset({DataKind::kTokens, path("big*.bin"), 1024, 1, {}, {}}, 50257).status(),
               absl::StatusCode::kInvalidArgument,
               {path("big3.bin"), "token 60000", "at index " + std::to_string(kIds - 5)});
}

// ---- synthetic task ----

struct Line {
  int a, b, c;
};

// Parses "a+b=c\n" lines independently of the generator; fails on anything else.
std::vector<Line> parse_lines(const std::vector<uint16_t>& tokens) {
  std::string text;
  for (uint16_t t : tokens) {
    EXPECT_LT(t, 128);
    text.push_back(static_cast<char>(t));
  }
  std::vector<Line> lines;
  size_t pos = 0;
  auto number = [&](char end) {
    const size_t stop = text.find(end, pos);
    EXPECT_NE(stop, std::string::npos);
    const std::string digits = text.substr(pos, stop - pos);
    EXPECT_FALSE(digits.empty());
    EXPECT_TRUE(std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) << digits;
    pos = stop + 1;
    return std::stoi(digits);
  };
  while (pos < text.size() && !::testing::Test::HasFailure()) {
    if (text[pos] == '\n') {  // segment padding
      ++pos;
      continue;
    }
    Line l;
    l.a = number('+');
    l.b = number('=');
    l.c = number('\n');
    lines.push_back(l);
  }
  return lines;
}

std::pair<int, int> parse_prompt(const std::string& prompt) {
  const size_t plus = prompt.find('+');
  EXPECT_EQ(prompt.back(), '=');
  return {std::stoi(prompt.substr(0, plus)), std::stoi(prompt.substr(plus + 1))};
}

// The planner sizes the synthetic stream without making it.
TEST(Synthetic, TokensAreCountedWithoutMakingTheStream) {
  for (int seq_len : {1, 3, 10, 11, 64, 1000}) {
    for (int max_operand : {-1, 0, 1, 9, 99, 999}) {
      for (int lines : {0, 1, 7, 1000}) {
        EXPECT_EQ(synthetic_task_tokens(seq_len, max_operand, lines),
                  static_cast<int64_t>(make_synthetic_task(5, seq_len, max_operand, lines).train_tokens.size()))
            << seq_len << " " << max_operand << " " << lines;
      }
    }
  }
}

TEST(Synthetic, TrainingLinesAreCorrectSums) {
  const SyntheticTask task = make_synthetic_task(7, 64, 99, 5000);
  const std::vector<Line> lines = parse_lines(task.train_tokens);
  ASSERT_EQ(lines.size(), 5000u);
  for (const Line& l : lines) {
    EXPECT_GE(l.a, 0);
    EXPECT_LE(l.a, 99);
    EXPECT_GE(l.b, 0);
    EXPECT_LE(l.b, 99);
    EXPECT_EQ(l.c, l.a + l.b);
  }
}

TEST(Synthetic, HeldOutIsATenthAndNeverTrainedOn) {
  // Ask for every held-out pair; with 20k lines over 397 training pairs every
  // training pair shows up, so the two sets must partition all 441 pairs.
  const SyntheticTask task = make_synthetic_task(3, 64, 20, 20000, 1 << 20);
  ASSERT_EQ(task.heldout.size(), 441u / 10);
  std::set<std::pair<int, int>> heldout;
  for (const auto& [prompt, answer] : task.heldout) {
    const auto [a, b] = parse_prompt(prompt);
    EXPECT_EQ(std::stoi(answer), a + b) << prompt;
    EXPECT_EQ(answer.size(), 2u) << "answers are padded to the width of 2 * 20";
    EXPECT_TRUE(heldout.insert({a, b}).second) << "duplicate " << prompt;
  }
  std::set<std::pair<int, int>> trained;
  for (const Line& l : parse_lines(task.train_tokens)) trained.insert({l.a, l.b});
  for (const auto& p : heldout) EXPECT_EQ(trained.count(p), 0u) << p.first << "+" << p.second;
  EXPECT_EQ(trained.size() + heldout.size(), 21u * 21u);
}

TEST(Synthetic, DefaultPromptsAreDistinctHeldOutPairs) {
  const SyntheticTask task = make_synthetic_task(11, 64);
  ASSERT_EQ(task.heldout.size(), 200u);
  // The split depends only on seed and max_operand, so the full held-out set
  // from the same seed contains every default prompt.
  const SyntheticTask all = make_synthetic_task(11, 64, 99, 1, 1 << 20);
  ASSERT_EQ(all.heldout.size(), 1000u);
  std::set<std::string> all_prompts, seen;
  for (const auto& h : all.heldout) all_prompts.insert(h.first);
  for (const auto& [prompt, answer] : task.heldout) {
    const auto [a, b] = parse_prompt(prompt);
    EXPECT_EQ(answer, absl::StrFormat("%03d", a + b));
    EXPECT_TRUE(seen.insert(prompt).second) << "duplicate " << prompt;
    EXPECT_EQ(all_prompts.count(prompt), 1u) << prompt;
  }
}

TEST(Synthetic, EverySegmentStartsAtALineWithFixedDigitPositions) {
  const int seq_len = 64;  // 1 + 6 lines of 10, then 3 newlines of padding
  const SyntheticTask task = make_synthetic_task(4, seq_len, 99, 600);
  ASSERT_EQ(task.train_tokens.size(), 100u * seq_len);
  for (size_t s = 0; s < task.train_tokens.size(); s += seq_len) {
    const std::string seg(task.train_tokens.begin() + s, task.train_tokens.begin() + s + seq_len);
    for (int line = 0; line < 6; ++line) {
      const std::string l = seg.substr(1 + 10 * line, 10);
      ASSERT_EQ(l[2], '+') << "segment at " << s << ": " << l;
      ASSERT_EQ(l[5], '=') << l;
      ASSERT_EQ(std::stoi(l.substr(6, 3)), std::stoi(l.substr(0, 2)) + std::stoi(l.substr(3, 2))) << l;
    }
    EXPECT_EQ(seg.substr(0, 1) + seg.substr(61), "\n\n\n\n") << "segment at " << s;
  }
}

TEST(Synthetic, DeterministicFromSeed) {
  const SyntheticTask a = make_synthetic_task(5, 64, 99, 2000);
  const SyntheticTask b = make_synthetic_task(5, 64, 99, 2000);
  const SyntheticTask c = make_synthetic_task(6, 64, 99, 2000);
  EXPECT_EQ(a.train_tokens, b.train_tokens);
  EXPECT_EQ(a.heldout, b.heldout);
  EXPECT_NE(a.train_tokens, c.train_tokens);
  EXPECT_NE(a.heldout, c.heldout);
}

TEST(Synthetic, LoadDatasetUsesConfigSeed) {
  DataConfig cfg{DataKind::kSynthetic, "", 16, 9, {}, {}};
  auto ds = load_dataset(cfg, 256);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const SyntheticTask task = make_synthetic_task(9, 16);
  EXPECT_EQ(ids_of(ds->tokens), widened(task.train_tokens));
  EXPECT_EQ(ds->heldout, task.heldout);
}

// dataset_tokens sizes data from the files' sizes and headers, as
// load_dataset then reads it; a file it cannot size gives load_dataset's error.
TEST_F(DataTest, DatasetTokensIsWhatLoadDatasetReads) {
  write_file(path("s0.bin"), good_shard(std::vector<uint16_t>(37, 4)));
  write_file(path("s1.bin"), good_shard(std::vector<uint16_t>(48, 5)));
  write_file(path("t.txt"), "bytes of text, enough for a window or two");
  for (const DataConfig& cfg :
       {DataConfig{DataKind::kTokens, path("s*.bin"), 8, 1, {}, {}},
        DataConfig{DataKind::kText, path("t.txt"), 8, 1, {}, {}}, DataConfig{DataKind::kSynthetic, "", 1, 1, {}, {}},
        DataConfig{DataKind::kSynthetic, "", 64, 2, {}, {}}, DataConfig{DataKind::kSynthetic, "", 1024, 3, {}, {}}}) {
    auto ds = load_dataset(cfg, 50257);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ(dataset_tokens(cfg).value_or(-1), ds->tokens.size()) << cfg.path << " " << cfg.seq_len;
  }
  write_file(path("s2.bin"), good_shard(std::vector<uint16_t>(9, 1)).substr(0, 1030));  // truncated
  for (const std::string& p : {path("s*.bin"), path("none*.bin"), path("absent.bin")}) {
    const DataConfig cfg{DataKind::kTokens, p, 8, 1, {}, {}};
    EXPECT_EQ(dataset_tokens(cfg).status(), load_dataset(cfg, 50257).status()) << p;
  }
}

// ---- DataLoader ----

// Token i has value i, so a window's first input names its start.
std::vector<uint16_t> counting_tokens(size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i);
  return t;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch next(DataLoader& loader, int B, int T) {
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  loader.next_batch(B, b.inputs.data(), b.targets.data());
  return b;
}

// Window index of each row, checking rows against the token stream directly.
std::vector<int64_t> windows_of(const Batch& batch, const std::vector<uint16_t>& tokens, int B, int T,
                                int64_t num_windows) {
  std::vector<int64_t> ws;
  for (int b = 0; b < B; ++b) {
    const int64_t start = batch.inputs[b * T];
    EXPECT_EQ(start % T, 0) << "window not aligned";
    EXPECT_LT(start / T, num_windows);
    for (int t = 0; t < T; ++t) {
      EXPECT_EQ(batch.inputs[b * T + t], tokens[start + t]);
      EXPECT_EQ(batch.targets[b * T + t], tokens[start + t + 1]);
    }
    ws.push_back(start / T);
  }
  return ws;
}

std::vector<int64_t> epoch_order(DataLoader& loader, const std::vector<uint16_t>& tokens, int T) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < loader.num_windows(); ++i) {
    for (int64_t w : windows_of(next(loader, 1, T), tokens, 1, T, loader.num_windows())) order.push_back(w);
  }
  return order;
}

bool is_permutation_of_all(std::vector<int64_t> order, int64_t n) {
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < n; ++i) {
    if (order.size() != static_cast<size_t>(n) || order[i] != i) return false;
  }
  return true;
}

TEST(DataLoader, NumWindowsIgnoresTail) {
  const auto tokens = counting_tokens(4 * 12 + 1 + 3);  // 3 tokens short of a 13th window
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, 4, 1);
  EXPECT_EQ(loader.num_windows(), 12);
}

// The window order is the accountant's, 8 bytes a window, as planned; past
// the host limit the loader is refused and nothing stays recorded.
TEST(DataLoader, WindowOrderIsAccountedAsPlanned) {
  const TokenStream stream(std::vector<uint16_t>(1001, 7));
  MemoryAccountant acct;
  {
    auto loader = DataLoader::create(&stream, 4, 1, 0, 1, acct);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_EQ(loader->num_windows(), 250);
    EXPECT_EQ(acct.current(Tier::kHost, Category::kWorkspace), 250u * 8);
    EXPECT_EQ(DataLoader::order_buffer(WindowReader::num_windows(1001, 4, false)).bytes, 250u * 8);
    EXPECT_EQ(WindowReader::num_windows(1000, 4, true), 250);  // windowed: no id past the last window
  }
  EXPECT_EQ(acct.current(Tier::kHost, Category::kWorkspace), 0u);
  acct.set_limit(Tier::kHost, 250 * 8 - 1);
  EXPECT_EQ(DataLoader::create(&stream, 4, 1, 0, 1, acct).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(acct.current(Tier::kHost, Category::kWorkspace), 0u);

  const DataConfig cfg{DataKind::kSynthetic, "", 64, 1, {}, {}};
  MemoryPlan plan;
  DataLoader::plan(cfg, plan);
  ASSERT_EQ(plan.buffers().size(), 1u);
  const Dataset ds = *load_dataset(cfg, 256);
  EXPECT_EQ(plan.buffers()[0].bytes, uint64_t((ds.tokens.size() - 1) / 64) * 8);
  MemoryPlan missing;
  DataLoader::plan({DataKind::kText, "/nonexistent/data.txt", 64, 1, {}, {}}, missing);
  EXPECT_TRUE(missing.buffers().empty()) << "data that cannot be sized here is left out";
}

TEST(DataLoader, TargetsAreInputsShiftedByOne) {
  const int T = 5, B = 3;
  const auto tokens = counting_tokens(T * 20 + 1);
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, T, 1);
  for (int step = 0; step < 15; ++step) {
    const Batch batch = next(loader, B, T);
    windows_of(batch, tokens, B, T, loader.num_windows());
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(batch.targets[b * T + t], batch.inputs[b * T + t + 1]);
    }
  }
}

TEST(DataLoader, EachWindowOncePerEpoch) {
  const int T = 4, B = 3;
  const auto tokens = counting_tokens(T * 12 + 2);  // 12 windows, 4 batches per epoch
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, T, 42);
  std::map<int64_t, int> visits;
  for (int step = 0; step < 4; ++step) {
    for (int64_t w : windows_of(next(loader, B, T), tokens, B, T, 12)) ++visits[w];
  }
  ASSERT_EQ(visits.size(), 12u);
  for (const auto& [w, n] : visits) EXPECT_EQ(n, 1) << "window " << w;
  EXPECT_EQ(loader.state().epoch, 0u);
  EXPECT_EQ(loader.state().position, 12u);
}

TEST(DataLoader, PartialBatchStartsNextEpoch) {
  const int T = 4, B = 5;
  const auto tokens = counting_tokens(T * 12 + 1);  // 12 windows: two batches of 5 fit
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, T, 42);
  std::set<int64_t> seen;
  for (int step = 0; step < 2; ++step) {
    for (int64_t w : windows_of(next(loader, B, T), tokens, B, T, 12)) seen.insert(w);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(loader.state().epoch, 0u);
  next(loader, B, T);
  EXPECT_EQ(loader.state().epoch, 1u);
  EXPECT_EQ(loader.state().position, 5u);
}

TEST(DataLoader, OrderDependsOnSeed) {
  const int T = 2;
  const auto tokens = counting_tokens(T * 50 + 1);
  const TokenStream stream(tokens);
  DataLoader a = *DataLoader::create(&stream, T, 1), b = *DataLoader::create(&stream, T, 1),
             c = *DataLoader::create(&stream, T, 2);
  const auto order_a = epoch_order(a, tokens, T);
  EXPECT_TRUE(is_permutation_of_all(order_a, 50));
  EXPECT_EQ(order_a, epoch_order(b, tokens, T));
  const auto order_c = epoch_order(c, tokens, T);
  EXPECT_TRUE(is_permutation_of_all(order_c, 50));
  EXPECT_NE(order_a, order_c);
}

TEST(DataLoader, TwoRanksMakeTheSingleRankBatch) {
  const int T = 3, B = 2;
  const auto tokens = counting_tokens(T * 25 + 1);  // 25 windows: 6 global batches then rollover
  const TokenStream stream(tokens);
  DataLoader single = *DataLoader::create(&stream, T, 5), rank0 = *DataLoader::create(&stream, T, 5, 0, 2),
             rank1 = *DataLoader::create(&stream, T, 5, 1, 2);
  for (int step = 0; step < 20; ++step) {
    const Batch whole = next(single, 2 * B, T), r0 = next(rank0, B, T), r1 = next(rank1, B, T);
    Batch joined = r0;
    joined.inputs.insert(joined.inputs.end(), r1.inputs.begin(), r1.inputs.end());
    joined.targets.insert(joined.targets.end(), r1.targets.begin(), r1.targets.end());
    EXPECT_EQ(joined, whole) << "step " << step;
    EXPECT_EQ(rank0.state().position, single.state().position);
    EXPECT_EQ(rank1.state().epoch, single.state().epoch);
  }
  EXPECT_GE(single.state().epoch, 2u);
}

TEST(DataLoader, RestoredStateReplaysBatches) {
  const int T = 4, B = 3;
  const auto tokens = counting_tokens(T * 17 + 1);
  const TokenStream stream(tokens);
  DataLoader original = *DataLoader::create(&stream, T, 99);
  // 17 windows hold 5 batches of 3, so 8 batches end mid-way through epoch 1;
  // restoring there needs epoch 1's permutation, not the constructor's.
  for (int step = 0; step < 8; ++step) next(original, B, T);
  const DataLoader::State saved = original.state();
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.position, 9u);

  DataLoader restored = *DataLoader::create(&stream, T, 99);
  restored.set_state(saved);
  for (int step = 0; step < 12; ++step) {  // crosses two epoch boundaries
    EXPECT_EQ(next(restored, B, T), next(original, B, T)) << "step " << step;
  }
  EXPECT_EQ(restored.state().epoch, original.state().epoch);
  EXPECT_EQ(restored.state().position, original.state().position);
  EXPECT_GE(original.state().epoch, 3u);
}

TEST(DataLoader, NewEpochReshufflesAndCoversAll) {
  const int T = 2;
  const auto tokens = counting_tokens(T * 40 + 1);
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, T, 3);
  const auto epoch0 = epoch_order(loader, tokens, T);
  EXPECT_EQ(loader.state().epoch, 0u);
  const auto epoch1 = epoch_order(loader, tokens, T);
  EXPECT_EQ(loader.state().epoch, 1u);
  EXPECT_TRUE(is_permutation_of_all(epoch0, 40));
  EXPECT_TRUE(is_permutation_of_all(epoch1, 40));
  EXPECT_NE(epoch0, epoch1);
}

TEST(DataLoader, TinyDataWrapsWithinABatch) {
  const int T = 2, B = 5;
  const auto tokens = counting_tokens(T * 3 + 1);  // 3 windows, fewer than one batch
  const TokenStream stream(tokens);
  DataLoader loader = *DataLoader::create(&stream, T, 8);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const auto ws = windows_of(next(loader, B, T), tokens, B, T, 3);
    EXPECT_EQ(loader.state().epoch, epoch);  // each batch is its own epoch
    EXPECT_TRUE(is_permutation_of_all({ws[0], ws[1], ws[2]}, 3));
    EXPECT_EQ(ws[3], ws[0]);
    EXPECT_EQ(ws[4], ws[1]);
  }
}

}  // namespace
}  // namespace zerod
