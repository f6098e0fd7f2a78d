// data.sources: several datasets mixed by weight. The loader's draws
// against the weights, each source's own walk, world sizes and resuming;
// the datasets' sizes and what is refused; a whole run resumed bitwise with
// the summary's count of what each source gave.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/data/data_loader.h"
#include "runtime/data/dataset.h"
#include "runtime/data/token_shard.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

using nlohmann::json;

constexpr int kT = 4;  // seq_len

// Source s's ids are s * 1000 + their index, so a window names its source
// and its place: window w of source s starts at id s * 1000 + w * kT.
class Sources : public testing::TempDirTest {
 protected:
  std::string source(int s, int tokens) {
    std::vector<uint16_t> ids(tokens);
    for (int i = 0; i < tokens; ++i) ids[i] = static_cast<uint16_t>(s * 1000 + i);
    const std::string file = path(absl::StrCat("s", s, ".bin"));
    EXPECT_TRUE(write_token_shard(file, ids).ok());
    return file;
  }
  DataConfig config(const std::vector<DataSource>& sources, uint64_t seed = 1) {
    DataConfig cfg{DataKind::kTokens, "", kT, seed, {}, sources};
    return cfg;
  }
  // The loader of `cfg`'s data at rank `rank` of `world`.
  DataLoader loader(const DataConfig& cfg, const Dataset& ds, int rank = 0, int world = 1) {
    std::vector<DataLoader::Source> sources;
    for (size_t i = 0; i < ds.sources.size(); ++i)
      sources.push_back({ds.sources[i].begin, ds.sources[i].tokens, cfg.sources[i].weight});
    auto l =
        DataLoader::create(&ds.tokens, kT, cfg.seed, rank, world, MemoryAccountant::global(), false, false, 0, sources);
    EXPECT_TRUE(l.ok()) << l.status();
    return *std::move(l);
  }
  Dataset load(const DataConfig& cfg) {
    auto ds = load_dataset(cfg, 4096);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? *std::move(ds) : Dataset{};
  }
};

struct Drawn {
  int source, window;
};
// The windows of a rank's batch of B (of `world` ranks): each one's source
// and window, its inputs and targets checked against the source's ids.
std::vector<Drawn> batch(DataLoader& l, int B, int world = 1) {
  std::vector<int32_t> in(B * kT), tg(B * kT);
  EXPECT_EQ(l.next_batch(B, in.data(), tg.data()), int64_t(world) * B * kT);
  std::vector<Drawn> out;
  for (int b = 0; b < B; ++b) {
    const int first = in[b * kT];
    for (int t = 0; t < kT; ++t) {
      EXPECT_EQ(in[b * kT + t], first + t);
      EXPECT_EQ(tg[b * kT + t], first + t + 1);
    }
    EXPECT_EQ(first % 1000 % kT, 0);
    out.push_back({first / 1000, first % 1000 / kT});
  }
  return out;
}

// Weights 3, 1 and 0 over 2000 windows: the first source gives 3/4 of
// them within 100 (the binomial's standard deviation is 19), the last
// none; each source's draws, in runs of its window count, are each a
// permutation of its windows (an epoch of its own).
TEST_F(Sources, DrawsEachSourceByItsWeightAndWalksEachWhole) {
  const DataConfig cfg = config({{source(0, 40), 3}, {source(1, 21), 1}, {source(2, 30), 0}});
  const Dataset ds = load(cfg);
  ASSERT_EQ(ds.sources.size(), 3u);
  DataLoader l = loader(cfg, ds);
  const int windows[] = {9, 5, 7};  // (tokens - 1) / kT
  EXPECT_EQ(l.num_windows(), 9 + 5 + 7);
  std::map<int, std::vector<int>> walk;
  for (int i = 0; i < 500; ++i)
    for (const Drawn& d : batch(l, 4)) walk[d.source].push_back(d.window);
  EXPECT_EQ(walk.count(2), 0u);
  EXPECT_NEAR(double(walk[0].size()), 1500, 100);
  EXPECT_EQ(walk[0].size() + walk[1].size(), 2000u);
  for (int s = 0; s < 2; ++s) {
    const std::vector<int>& w = walk[s];
    for (size_t from = 0; from + windows[s] <= w.size(); from += windows[s]) {
      const std::set<int> epoch(w.begin() + from, w.begin() + from + windows[s]);
      EXPECT_EQ(epoch.size(), size_t(windows[s])) << "source " << s << " epoch at " << from;
      EXPECT_EQ(*epoch.rbegin(), windows[s] - 1);
    }
  }
  const DataLoader::State st = l.state();
  EXPECT_EQ(st.taken, (std::vector<uint64_t>{walk[0].size(), walk[1].size(), 0}));
  EXPECT_EQ(st.position, 2000u);
  // Another seed, another mix.
  const DataConfig other = config(cfg.sources, 2);
  DataLoader m = loader(other, ds);
  std::vector<int> a, b;
  DataLoader again = loader(cfg, ds);
  for (int i = 0; i < 20; ++i) {
    for (const Drawn& d : batch(m, 4)) a.push_back(d.source * 100 + d.window);
    for (const Drawn& d : batch(again, 4)) b.push_back(d.source * 100 + d.window);
  }
  EXPECT_NE(a, b);
}

// A global batch of 4 windows at 1, 2 and 4 ranks: the ranks' parts, in
// rank order, are the single rank's batch, and each rank counts the whole
// batch's targets.
TEST_F(Sources, TheSameWindowsAtEveryWorldSize) {
  const DataConfig cfg = config({{source(0, 40), 2}, {source(1, 21), 1}, {source(2, 13), 1}});
  const Dataset ds = load(cfg);
  DataLoader one = loader(cfg, ds);
  std::vector<DataLoader> two, four;
  for (int r = 0; r < 2; ++r) two.push_back(loader(cfg, ds, r, 2));
  for (int r = 0; r < 4; ++r) four.push_back(loader(cfg, ds, r, 4));
  for (int i = 0; i < 100; ++i) {
    std::vector<std::pair<int, int>> want, got2, got4;
    for (const Drawn& d : batch(one, 4)) want.push_back({d.source, d.window});
    for (DataLoader& l : two)
      for (const Drawn& d : batch(l, 2, 2)) got2.push_back({d.source, d.window});
    for (DataLoader& l : four)
      for (const Drawn& d : batch(l, 1, 4)) got4.push_back({d.source, d.window});
    ASSERT_EQ(got2, want) << "batch " << i;
    ASSERT_EQ(got4, want) << "batch " << i;
  }
  EXPECT_EQ(two[1].state().taken, one.state().taken);
}

// A loader set to another's state mid-walk (a resume) draws what the other
// draws next, window for window.
TEST_F(Sources, ResumesFromItsState) {
  const DataConfig cfg = config({{source(0, 40), 1}, {source(1, 9), 1}});
  const Dataset ds = load(cfg);
  DataLoader a = loader(cfg, ds);
  for (int i = 0; i < 37; ++i) batch(a, 3);
  DataLoader b = loader(cfg, ds);
  b.set_state(a.state());
  for (int i = 0; i < 50; ++i) {
    std::vector<std::pair<int, int>> x, y;
    for (const Drawn& d : batch(a, 3)) x.push_back({d.source, d.window});
    for (const Drawn& d : batch(b, 3)) y.push_back({d.source, d.window});
    ASSERT_EQ(x, y) << "batch " << i;
  }
}

// Each source is cut into windows of its own: two of 16 ids at seq_len 8
// give a window each ((16 - 1) / 8), where their 32 ids in one stream
// would give 3; the plan's count and the loader's agree.
TEST_F(Sources, EachSourceHasWindowsOfItsOwn) {
  std::vector<uint16_t> ids(16, 7);
  ASSERT_TRUE(write_token_shard(path("a.bin"), ids).ok());
  ASSERT_TRUE(write_token_shard(path("b.bin"), ids).ok());
  DataConfig cfg{DataKind::kTokens, "", 8, 1, {}, {{path("a.bin"), 1}, {path("b.bin"), 1}}};
  EXPECT_EQ(*dataset_windows(cfg), 2);
  EXPECT_EQ(*dataset_tokens(cfg), 32);
  auto ds = load_dataset(cfg, 64);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto l = DataLoader::create(&ds->tokens, 8, 1, 0, 1, MemoryAccountant::global(), false, false, 0,
                              {{ds->sources[0].begin, 16, 1}, {ds->sources[1].begin, 16, 1}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->num_windows(), 2);
  DataConfig one{DataKind::kTokens, path("*.bin"), 8, 1, {}, {}};
  EXPECT_EQ(*dataset_windows(one), 3);
}

// A source missing, too small for a window, or of another kind than the
// first: refused naming it; the plan's count fails on the first two.
TEST_F(Sources, RefusesABadSourceNamingIt) {
  const std::string a = source(0, 40);
  auto refused = [&](const DataConfig& cfg, const std::string& message, bool sized) {
    auto ds = load_dataset(cfg, 4096);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().message(), message);
    auto windows = dataset_windows(cfg);
    EXPECT_EQ(windows.ok(), sized) << message;
    if (!sized) {
      EXPECT_EQ(windows.status().message(), message);
    }
  };
  refused(config({{a, 1}, {path("missing.bin"), 1}}),
          "data.sources[1].path '" + path("missing.bin") + "' does not exist", false);
  refused(config({{a, 1}, {path("none*.bin"), 1}}), "data.sources[1].path '" + path("none*.bin") + "' matches no files",
          false);
  refused(config({{a, 1}, {source(1, 3), 1}}),
          "data.sources[1].path '" + path("s1.bin") + "' has 3 tokens, fewer than one window of seq_len+1 = 5", true);
  ASSERT_TRUE(write_window_shard(path("w.bin"), std::vector<uint32_t>(8, 5), kT, false).ok());
  refused(config({{a, 1}, {path("w.bin"), 1}}),
          "data file '" + path("w.bin") + "': a windowed shard among plain ones; one dataset holds one kind", true);
}

// A run on two sources, 12 steps saved at step 6, resumed from it: the
// last 6 steps' losses bitwise the straight run's; the summary counts each
// source's windows (all of the run's, 12 steps of 8) and their tokens; the
// memory plan holds to the byte.
TEST_F(Sources, ARunResumesBitwiseAndCountsWhatEachGave) {
  std::mt19937 rng(3);
  for (const char* name : {"code.bin", "chat.bin"}) {
    std::vector<uint16_t> ids(name[1] == 'o' ? 900 : 300);
    for (uint16_t& id : ids) id = static_cast<uint16_t>(rng() % 250);
    ASSERT_TRUE(write_token_shard(path(name), ids).ok());
  }
  json job = testing::tiny_job();
  job.merge_patch(
      {{"model", {{"vocab_size", 256}, {"block_size", 16}}},
       {"data",
        {{"kind", "tokens"},
         {"seq_len", 16},
         {"sources", {{{"path", path("code.bin")}, {"weight", 3}}, {{"path", path("chat.bin")}, {"weight", 1}}}}}},
       {"run", {{"steps", 12}}},
       {"steps_per_print", 1},
       {"train_micro_batch_size_per_gpu", 8}});
  const std::string straight = write("straight.json", job.dump());
  job.merge_patch({{"run", {{"checkpoint", {{"dir", path("ckpt")}, {"interval", 6}}}}}});
  const std::string saved = write("saved.json", job.dump());

  const testing::WorkerResult a = testing::run_worker_with({"--config", straight, "--log-format", "json"});
  ASSERT_EQ(a.code, 0) << a.err;
  const testing::WorkerResult first =
      testing::run_worker_with({"--config", saved, "--set", "run.steps=6", "--log-format", "json"});
  ASSERT_EQ(first.code, 0) << first.err;
  const testing::WorkerResult resumed =
      testing::run_worker_with({"--config", saved, "--set", "run.resume=\"latest\"", "--log-format", "json"});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::vector<double> all = testing::step_losses(a.out), last = testing::step_losses(resumed.out);
  ASSERT_EQ(all.size(), 12u);
  ASSERT_EQ(last.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(last[i], all[6 + i]) << "step " << 7 + i;

  for (const testing::WorkerResult* r : {&a, &resumed}) {
    const std::vector<json> summary = testing::of_kind(testing::events(r->out), "summary");
    ASSERT_EQ(summary.size(), 1u);
    const json& sources = summary[0]["sources"];
    ASSERT_EQ(sources.size(), 2u);
    EXPECT_EQ(sources[0]["path"], path("code.bin"));
    EXPECT_EQ(sources[0]["weight"], 3);
    EXPECT_EQ(sources[0]["windows"].get<int>() + sources[1]["windows"].get<int>(), 12 * 8);
    EXPECT_GT(sources[0]["windows"].get<int>(), sources[1]["windows"].get<int>());
    for (const json& s : sources) EXPECT_EQ(s["tokens"], s["windows"].get<int>() * 16);
  }
  EXPECT_EQ(testing::of_kind(testing::events(a.out), "summary")[0]["sources"],
            testing::of_kind(testing::events(resumed.out), "summary")[0]["sources"]);
  // A resume with other weights, or another source, would not continue the
  // walk: refused naming both lists.
  for (const std::string& other : {"data.sources=[{\"path\": \"" + path("code.bin") +
                                       "\", \"weight\": 1}, {\"path\": \"" + path("chat.bin") + "\", \"weight\": 1}]",
                                   "data.sources=[{\"path\": \"" + path("code.bin") + "\", \"weight\": 3}]"}) {
    const testing::WorkerResult r =
        testing::run_worker_with({"--config", saved, "--set", "run.resume=\"latest\"", "--set", other});
    EXPECT_EQ(r.code, 2) << other;
    EXPECT_NE(r.err.find("this run has [{\"path\":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(the walk over them would not continue)"), std::string::npos) << r.err;
  }
  const testing::WorkerResult text = testing::run_worker_with({"--config", straight});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("data.sources since the run began:\n  " + path("code.bin") + " (weight 3): "),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("(the memory plan foresaw every tier and category to the byte)"), std::string::npos)
      << text.out;
}

}  // namespace
}  // namespace zerod
