// The coordinator's job store: the state machine of jobs and attempts,
// terminal states that never change, records that survive reopening, and
// files that are not a job store refused by name.
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "runtime/coordinator/job_store.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"

namespace zerod {
namespace {

using google::protobuf::util::MessageDifferencer;

class JobStoreTest : public testing::TempDirTest {
 protected:
  std::unique_ptr<JobStore> open() {
    auto s = JobStore::open(path("jobs.db"));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static v1::SubmitJobRequest spec(const std::string& name) {
    v1::SubmitJobRequest r;
    r.set_name(name);
    r.set_config_json("{\"model\": {\"preset\": \"gpt2-tiny\"}}");
    r.set_world_size(2);
    r.mutable_restart()->set_max_restarts(1);
    return r;
  }
  static v1::Failure killed(int rank) {
    v1::Failure f;
    f.set_rank(rank);
    f.set_host("localhost");
    f.set_signal(9);
    f.set_reason("killed by signal 9");
    f.add_last_log_lines("step 4/10 | loss 3.1");
    return f;
  }
};

TEST_F(JobStoreTest, AJobRunsAttemptsAndFinishes) {
  auto store = open();
  auto job = store->add(spec("demo"), 1000);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::PENDING);
  EXPECT_EQ(job->submitted_unix_ms(), 1000);
  EXPECT_TRUE(MessageDifferencer::Equals(job->spec(), spec("demo")));
  const std::string id = job->id();

  EXPECT_EQ(*store->start_attempt(id, 2000), 1);
  EXPECT_EQ(store->start_attempt(id, 2001).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::Progress p;
  p.set_step(4);
  p.set_total_steps(10);
  p.set_loss(3.1);
  ASSERT_TRUE(store->set_progress(id, p).ok());
  ASSERT_TRUE(store->end_attempt(id, 1, v1::FAILED, killed(1), 3000).ok());
  EXPECT_EQ(store->end_attempt(id, 1, v1::FAILED, killed(1), 3001).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store->start_attempt(id, 4000), 2);
  ASSERT_TRUE(store->end_attempt(id, 2, v1::FAILED, killed(0), 5000).ok());
  EXPECT_EQ(*store->start_attempt(id, 6000), 3);
  ASSERT_TRUE(store->finish(id, v1::SUCCEEDED, 7000).ok());

  const v1::Job done = *store->get(id);
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.finished_unix_ms(), 7000);
  ASSERT_EQ(done.attempts_size(), 3);
  EXPECT_EQ(done.attempts(0).state(), v1::FAILED);
  EXPECT_EQ(done.attempts(0).started_unix_ms(), 2000);
  EXPECT_EQ(done.attempts(0).ended_unix_ms(), 3000);
  EXPECT_TRUE(MessageDifferencer::Equals(done.attempts(1).failure(), killed(0)));
  // The running attempt ends with the job.
  EXPECT_EQ(done.attempts(2).state(), v1::SUCCEEDED);
  EXPECT_EQ(done.attempts(2).ended_unix_ms(), 7000);
  // The first failure is the first attempt's, not the latest.
  EXPECT_TRUE(MessageDifferencer::Equals(done.first_failure(), killed(1)));
  EXPECT_TRUE(MessageDifferencer::Equals(done.progress(), p));
}

TEST_F(JobStoreTest, AFinishedJobNeverChanges) {
  auto store = open();
  const std::string ran = store->add(spec("ran"), 1)->id(), never = store->add(spec("never"), 2)->id();
  EXPECT_EQ(store->finish(never, v1::SUCCEEDED, 3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->finish(never, v1::CANCELLED, 3).ok());
  ASSERT_EQ(*store->start_attempt(ran, 4), 1);
  ASSERT_TRUE(store->finish(ran, v1::FAILED, 5).ok());
  for (const std::string& id : {ran, never}) {
    SCOPED_TRACE(id);
    const v1::Job before = *store->get(id);
    const absl::Status s = store->finish(id, v1::SUCCEEDED, 9);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("a finished job does not change"), std::string::npos) << s;
    EXPECT_EQ(store->start_attempt(id, 9).status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(store->end_attempt(id, 1, v1::SUCCEEDED, {}, 9).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(store->set_progress(id, v1::Progress()).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(MessageDifferencer::Equals(*store->get(id), before));
  }
  EXPECT_EQ(store->get(never)->state(), v1::CANCELLED);
  EXPECT_EQ(store->get(ran)->attempts(0).state(), v1::FAILED);
}

TEST_F(JobStoreTest, BadRequestsAreRefusedAndChangeNothing) {
  auto store = open();
  const std::string id = store->add(spec("a"), 1)->id();
  const v1::Job before = *store->get(id);
  for (const char* bad : {"99", "0", "-1", "x", ""}) {
    EXPECT_EQ(store->get(bad).status().code(), absl::StatusCode::kNotFound) << bad;
    EXPECT_EQ(store->start_attempt(bad, 2).status().code(), absl::StatusCode::kNotFound) << bad;
    EXPECT_EQ(store->finish(bad, v1::CANCELLED, 2).code(), absl::StatusCode::kNotFound) << bad;
  }
  EXPECT_NE(store->get("99").status().message().find("no job '99'"), std::string::npos);
  EXPECT_EQ(store->finish(id, v1::RUNNING, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->end_attempt(id, 1, v1::RUNNING, {}, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->end_attempt(id, 1, v1::FAILED, {}, 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(MessageDifferencer::Equals(*store->get(id), before));
  EXPECT_EQ(store->list()->size(), 1u);
}

TEST_F(JobStoreTest, RecordsSurviveReopening) {
  std::vector<v1::Job> before;
  {
    auto store = open();
    const std::string a = store->add(spec("a"), 1)->id(), b = store->add(spec("b"), 2)->id();
    store->add(spec("c"), 3).IgnoreError();
    ASSERT_EQ(*store->start_attempt(a, 4), 1);
    ASSERT_TRUE(store->finish(a, v1::SUCCEEDED, 5).ok());
    ASSERT_EQ(*store->start_attempt(b, 6), 1);
    before = *store->list();
  }
  auto store = open();
  const std::vector<v1::Job> after = *store->list();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(MessageDifferencer::Equals(after[i], before[i])) << i;
  // What was running when zerod stopped is found again by its state.
  const std::vector<v1::Job> running = *store->list({v1::RUNNING});
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].spec().name(), "b");
  EXPECT_EQ(store->list({v1::PENDING, v1::SUCCEEDED})->size(), 2u);
  // Ids are never reused.
  EXPECT_EQ(store->add(spec("d"), 7)->id(), "4");
}

TEST_F(JobStoreTest, ConcurrentSubmissionsGetDistinctIds) {
  auto store = open();
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> ids(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) ids[t].push_back(store->add(spec("j"), i)->id());
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(store->list()->size(), 100u);
}

TEST_F(JobStoreTest, RefusesWhatIsNotAJobStore) {
  const auto refused = [&](const std::string& p, const std::string& text) {
    auto s = JobStore::open(p);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  };
  refused(write("junk.db", std::string(4096, 'z')), "not a zerod job store");
  refused(path("missing/dir/jobs.db"), "cannot open job store");
  // Another application's database, and a job store of a newer format.
  const auto sql = [&](const std::string& name, const char* statement) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path(name).c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, statement, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  };
  sql("other.db", "CREATE TABLE t (x INTEGER)");
  refused(path("other.db"), "another application's SQLite database");
  ASSERT_TRUE(JobStore::open(path("newer.db")).ok());
  sql("newer.db", "PRAGMA user_version = 2");
  refused(path("newer.db"), "job store format 2 is not 1");
  EXPECT_EQ(testing::read_file(path("junk.db")), std::string(4096, 'z'));  // untouched
}

// Ids are never reused: a store is refused beside job directories it did
// not number, before anything is written to it.
TEST_F(JobStoreTest, AStoreThatDidNotNumberTheJobsBesideItIsRefused) {
  {
    std::unique_ptr<JobStore> store = open();
    ASSERT_TRUE(store);
    EXPECT_EQ(*store->last_id(), 0);
    ASSERT_TRUE(store->add(spec("a"), 1).ok());
    ASSERT_TRUE(store->add(spec("b"), 2).ok());
    EXPECT_EQ(*store->last_id(), 2);
  }
  const std::string before = testing::read_file(path("jobs.db"));
  const auto refused = [&](const std::string& p, int64_t beside, const std::string& text) {
    auto s = JobStore::open(p, beside);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
    EXPECT_NE(s.status().message().find(text), std::string::npos) << s.status();
  };
  refused(path("jobs.db"), 3, "jobs.db knows jobs up to 2 but job directories up to 3 are beside it");
  EXPECT_EQ(testing::read_file(path("jobs.db")), before);
  refused(path("gone.db"), 1, "gone.db is missing but job directories up to 1");
  EXPECT_FALSE(std::filesystem::exists(path("gone.db")));
  refused(write("empty.db", ""), 1, "empty.db is empty but");
  EXPECT_EQ(testing::read_file(path("empty.db")), "");
  EXPECT_TRUE(JobStore::open(path("jobs.db"), 2).ok());
  // A directory where the file should be cannot be read.
  std::filesystem::create_directories(path("dir.db"));
  refused(path("dir.db"), 0, "dir.db");
}

}  // namespace
}  // namespace zerod
