#include "runtime/coordinator/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zerod {
namespace {

// Marks the file as ours (PRAGMA application_id: "ZRJS").
constexpr int kApplicationId = 0x5a524a53;
constexpr int kFormatVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  spec BLOB NOT NULL,             -- v1.SubmitJobRequest
  state INTEGER NOT NULL,         -- v1.JobState
  submitted_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL DEFAULT 0,
  progress BLOB,                  -- v1.Progress
  first_failure BLOB              -- v1.Failure
);
CREATE TABLE attempts (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  number INTEGER NOT NULL,
  state INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL DEFAULT 0,
  failure BLOB,                   -- v1.Failure
  PRIMARY KEY (job_id, number)
);
)sql";

absl::Status sql_error(sqlite3* db, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", sqlite3_errmsg(db)));
}

absl::Status exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const absl::Status s = absl::InternalError(absl::StrCat("job store: ", err ? err : "error"));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

// A prepared statement, finalized when it goes.
class Stmt {
 public:
  static absl::StatusOr<Stmt> prepare(sqlite3* db, const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) return sql_error(db, "job store");
    return Stmt(db, s);
  }
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() { sqlite3_finalize(s_); }

  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind_blob(int i, const std::string& bytes) {
    sqlite3_bind_blob(s_, i, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // The next row: true, or false when there is none.
  absl::StatusOr<bool> step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return sql_error(db_, "job store");
  }
  absl::Status run() { return step().status(); }
  int64_t i64(int col) const { return sqlite3_column_int64(s_, col); }
  std::string blob(int col) const {
    const void* p = sqlite3_column_blob(s_, col);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s_, col)) : std::string();
  }

 private:
  Stmt(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  sqlite3* db_;
  sqlite3_stmt* s_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless committed.
class Transaction {
 public:
  static absl::StatusOr<Transaction> begin(sqlite3* db) {
    ZEROD_RETURN_IF_ERROR(exec(db, "BEGIN IMMEDIATE"));
    return Transaction(db);
  }
  Transaction(Transaction&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction() {
    if (db_) exec(db_, "ROLLBACK").IgnoreError();
  }
  absl::Status commit() { return exec(std::exchange(db_, nullptr), "COMMIT"); }

 private:
  explicit Transaction(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

absl::StatusOr<int64_t> pragma(sqlite3* db, const char* name) {
  ZEROD_ASSIGN_OR_RETURN(Stmt s, Stmt::prepare(db, absl::StrCat("PRAGMA ", name).c_str()));
  ZEROD_ASSIGN_OR_RETURN(bool row, s.step());
  return row ? s.i64(0) : 0;
}

absl::StatusOr<int64_t> job_number(const std::string& id) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(id, &n) || n <= 0) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  return n;
}

absl::Status unchangeable(const v1::Job& job) {
  return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is ", v1::JobState_Name(job.state()),
                                                    "; a finished job does not change"));
}

}  // namespace

bool is_terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::open(const std::string& path, int64_t jobs_beside) {
  const auto not_theirs = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " ", what, " but job directories up to ", jobs_beside,
                     " are beside it: it is not their store (restore theirs, or start zerod on a new --state-dir)"));
  };
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (jobs_beside > 0 && (ec || bytes == 0)) return not_theirs(ec ? "is missing" : "is empty");
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<JobStore> store(new JobStore(db));
  if (rc != SQLITE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open job store ", path, ": ", db ? sqlite3_errmsg(db) : "out of memory"));
  }
  sqlite3_busy_timeout(db, 5000);
  const auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  absl::StatusOr<int64_t> app = pragma(db, "application_id");
  if (!app.ok()) return refuse(absl::StrCat("not a zerod job store (", app.status().message(), ")"));
  ZEROD_ASSIGN_OR_RETURN(int64_t tables, [&]() -> absl::StatusOr<int64_t> {
    ZEROD_ASSIGN_OR_RETURN(Stmt s, Stmt::prepare(db, "SELECT count(*) FROM sqlite_master"));
    ZEROD_RETURN_IF_ERROR(s.step().status());
    return s.i64(0);
  }());
  if (*app == 0 && tables == 0) {
    if (jobs_beside > 0) return not_theirs("holds no jobs");
    ZEROD_ASSIGN_OR_RETURN(Transaction t, Transaction::begin(db));
    ZEROD_RETURN_IF_ERROR(exec(db, kSchema));
    ZEROD_RETURN_IF_ERROR(exec(db, absl::StrCat("PRAGMA application_id = ", kApplicationId)));
    ZEROD_RETURN_IF_ERROR(exec(db, absl::StrCat("PRAGMA user_version = ", kFormatVersion)));
    ZEROD_RETURN_IF_ERROR(t.commit());
  } else if (*app != kApplicationId) {
    return refuse("not a zerod job store (another application's SQLite database)");
  }
  ZEROD_ASSIGN_OR_RETURN(int64_t version, pragma(db, "user_version"));
  if (version != kFormatVersion) {
    return refuse(absl::StrCat("job store format ", version, " is not ", kFormatVersion, ", the one this build reads"));
  }
  ZEROD_ASSIGN_OR_RETURN(const int64_t last, store->last_id());
  if (last < jobs_beside) return not_theirs(absl::StrCat("knows jobs up to ", last));
  if (sqlite3_db_readonly(db, "main") == 1) {
    return refuse("zerod cannot write it (read-only: see its permissions and its directory's)");
  }
  // Committed means on disk: a crash of zerod or of the machine keeps it.
  // A store that cannot take a write is refused now, not at the first job.
  for (const std::string& sql : {std::string("PRAGMA journal_mode = WAL"), std::string("PRAGMA synchronous = FULL"),
                                 absl::StrCat("BEGIN IMMEDIATE; PRAGMA user_version = ", kFormatVersion, "; COMMIT")}) {
    if (absl::Status s = exec(db, sql); !s.ok()) {
      return refuse(absl::StrCat("zerod cannot write it (", s.message(), ")"));
    }
  }
  return store;
}

absl::StatusOr<int64_t> JobStore::last_id() {
  std::lock_guard<std::mutex> lock(mu_);
  ZEROD_ASSIGN_OR_RETURN(Stmt s,
                         Stmt::prepare(db_, "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'jobs'"));
  ZEROD_RETURN_IF_ERROR(s.step().status());
  return s.i64(0);
}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::StatusOr<v1::Job> JobStore::add(const v1::SubmitJobRequest& spec, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  ZEROD_ASSIGN_OR_RETURN(Stmt s, Stmt::prepare(db_, "INSERT INTO jobs (spec, state, submitted_ms) VALUES (?, ?, ?)"));
  ZEROD_RETURN_IF_ERROR(s.bind_blob(1, spec.SerializeAsString()).bind(2, v1::PENDING).bind(3, now_ms).run());
  return get_locked(absl::StrCat(sqlite3_last_insert_rowid(db_)));
}

absl::StatusOr<v1::Job> JobStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return get_locked(id);
}

absl::StatusOr<v1::Job> JobStore::get_locked(const std::string& id) {
  ZEROD_ASSIGN_OR_RETURN(int64_t n, job_number(id));
  ZEROD_ASSIGN_OR_RETURN(
      Stmt s, Stmt::prepare(db_, "SELECT spec, state, submitted_ms, finished_ms, progress, first_failure FROM jobs "
                                 "WHERE id = ?"));
  s.bind(1, n);
  ZEROD_ASSIGN_OR_RETURN(bool found, s.step());
  if (!found) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  v1::Job job;
  job.set_id(absl::StrCat(n));
  if (!job.mutable_spec()->ParseFromString(s.blob(0)) || !job.mutable_progress()->ParseFromString(s.blob(4)) ||
      !job.mutable_first_failure()->ParseFromString(s.blob(5))) {
    return absl::DataLossError(absl::StrCat("job store: the record of job ", n, " does not parse"));
  }
  job.set_state(static_cast<v1::JobState>(s.i64(1)));
  job.set_submitted_unix_ms(s.i64(2));
  job.set_finished_unix_ms(s.i64(3));
  ZEROD_ASSIGN_OR_RETURN(
      Stmt a, Stmt::prepare(db_, "SELECT number, state, started_ms, ended_ms, failure FROM attempts WHERE job_id = ? "
                                 "ORDER BY number"));
  a.bind(1, n);
  for (;;) {
    ZEROD_ASSIGN_OR_RETURN(bool row, a.step());
    if (!row) break;
    v1::Attempt* at = job.add_attempts();
    at->set_number(static_cast<int>(a.i64(0)));
    at->set_state(static_cast<v1::JobState>(a.i64(1)));
    at->set_started_unix_ms(a.i64(2));
    at->set_ended_unix_ms(a.i64(3));
    if (!at->mutable_failure()->ParseFromString(a.blob(4))) {
      return absl::DataLossError(absl::StrCat("job store: attempt ", at->number(), " of job ", n, " does not parse"));
    }
  }
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::list(const std::vector<v1::JobState>& states) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  {
    ZEROD_ASSIGN_OR_RETURN(Stmt s, Stmt::prepare(db_, "SELECT id, state FROM jobs ORDER BY id"));
    for (;;) {
      ZEROD_ASSIGN_OR_RETURN(bool row, s.step());
      if (!row) break;
      const auto state = static_cast<v1::JobState>(s.i64(1));
      if (states.empty() || std::find(states.begin(), states.end(), state) != states.end()) ids.push_back(s.i64(0));
    }
  }
  std::vector<v1::Job> jobs;
  for (int64_t id : ids) {
    ZEROD_ASSIGN_OR_RETURN(v1::Job job, get_locked(absl::StrCat(id)));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::Status JobStore::change(const std::string& id, const Change& body) {
  ZEROD_ASSIGN_OR_RETURN(const int64_t n, job_number(id));
  std::lock_guard<std::mutex> lock(mu_);
  ZEROD_ASSIGN_OR_RETURN(Transaction t, Transaction::begin(db_));
  ZEROD_ASSIGN_OR_RETURN(v1::Job job, get_locked(id));
  if (is_terminal(job.state())) return unchangeable(job);
  ZEROD_RETURN_IF_ERROR(body(n, job));
  return t.commit();
}

absl::StatusOr<int> JobStore::start_attempt(const std::string& id, int64_t now_ms) {
  int number = 0;
  ZEROD_RETURN_IF_ERROR(change(id, [&](int64_t n, const v1::Job& job) -> absl::Status {
    for (const v1::Attempt& a : job.attempts()) {
      if (a.state() == v1::RUNNING) {
        return absl::FailedPreconditionError(absl::StrCat("job ", id, " already has attempt ", a.number(), " running"));
      }
    }
    number = job.attempts_size() + 1;
    ZEROD_ASSIGN_OR_RETURN(Stmt ins, Stmt::prepare(db_, "INSERT INTO attempts (job_id, number, state, started_ms) "
                                                        "VALUES (?, ?, ?, ?)"));
    ZEROD_RETURN_IF_ERROR(ins.bind(1, n).bind(2, number).bind(3, v1::RUNNING).bind(4, now_ms).run());
    ZEROD_ASSIGN_OR_RETURN(Stmt up, Stmt::prepare(db_, "UPDATE jobs SET state = ? WHERE id = ?"));
    return up.bind(1, v1::RUNNING).bind(2, n).run();
  }));
  return number;
}

absl::Status JobStore::end_attempt(const std::string& id, int number, v1::JobState outcome,
                                   const v1::Failure& failure, int64_t now_ms) {
  if (!is_terminal(outcome)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an attempt ends SUCCEEDED, FAILED or CANCELLED, not ", v1::JobState_Name(outcome)));
  }
  return change(id, [&](int64_t n, const v1::Job& job) -> absl::Status {
    if (number < 1 || number > job.attempts_size() || job.attempts(number - 1).state() != v1::RUNNING) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " has no attempt ", number, " running"));
    }
    ZEROD_ASSIGN_OR_RETURN(
        Stmt s, Stmt::prepare(db_, "UPDATE attempts SET state = ?, ended_ms = ?, failure = ? WHERE job_id = ? AND "
                                   "number = ?"));
    ZEROD_RETURN_IF_ERROR(
        s.bind(1, outcome).bind(2, now_ms).bind_blob(3, failure.SerializeAsString()).bind(4, n).bind(5, number).run());
    if (outcome != v1::FAILED || job.first_failure().ByteSizeLong() != 0) return absl::OkStatus();
    ZEROD_ASSIGN_OR_RETURN(Stmt f, Stmt::prepare(db_, "UPDATE jobs SET first_failure = ? WHERE id = ?"));
    return f.bind_blob(1, failure.SerializeAsString()).bind(2, n).run();
  });
}

absl::Status JobStore::finish(const std::string& id, v1::JobState state, int64_t now_ms) {
  if (!is_terminal(state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job finishes SUCCEEDED, FAILED or CANCELLED, not ", v1::JobState_Name(state)));
  }
  return change(id, [&](int64_t n, const v1::Job& job) -> absl::Status {
    if (state == v1::SUCCEEDED && job.attempts_size() == 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " never ran, so it cannot have succeeded"));
    }
    ZEROD_ASSIGN_OR_RETURN(Stmt a, Stmt::prepare(db_, "UPDATE attempts SET state = ?, ended_ms = ? WHERE job_id = ? "
                                                      "AND state = ?"));
    ZEROD_RETURN_IF_ERROR(a.bind(1, state).bind(2, now_ms).bind(3, n).bind(4, v1::RUNNING).run());
    ZEROD_ASSIGN_OR_RETURN(Stmt j, Stmt::prepare(db_, "UPDATE jobs SET state = ?, finished_ms = ? WHERE id = ?"));
    return j.bind(1, state).bind(2, now_ms).bind(3, n).run();
  });
}

absl::Status JobStore::set_progress(const std::string& id, const v1::Progress& progress) {
  return change(id, [&](int64_t n, const v1::Job&) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(Stmt s, Stmt::prepare(db_, "UPDATE jobs SET progress = ? WHERE id = ?"));
    return s.bind_blob(1, progress.SerializeAsString()).bind(2, n).run();
  });
}

}  // namespace zerod
