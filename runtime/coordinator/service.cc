#include "runtime/coordinator/service.h"

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "runtime/coordinator/auth.h"

namespace zerod {
namespace {

constexpr int64_t kLogChunkBytes = 64 << 10;

grpc::Status to_grpc(const absl::Status& s) {
  // absl's codes are gRPC's, number for number.
  return s.ok() ? grpc::Status::OK : grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The token and a running supervisor, or why the call is refused.
grpc::Status admit(const grpc::CallbackServerContext& ctx, const Backend& backend, Supervisor** sup) {
  grpc::Status s = check_token(ctx, backend.token);
  if (!s.ok()) return s;
  *sup = backend.supervisor.load();
  if (!*sup) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "zerod is starting");
  return grpc::Status::OK;
}

// A call's outcome in /metrics, from when it came.
void count(Backend& backend, const char* method, const grpc::Status& s, std::chrono::steady_clock::time_point since) {
  backend.stats.record(method, absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
}

// A unary call: admitted, then `body` gives the status; counted as `method`.
template <typename Body>
grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* ctx, Backend& backend, const char* method, Body body) {
  const auto t0 = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  Supervisor* sup = nullptr;
  grpc::Status s = admit(*ctx, backend, &sup);
  if (s.ok()) s = to_grpc(body(*sup));
  count(backend, method, s, t0);
  r->Finish(s);
  return r;
}

// A stream pumped by the hub: next() says what to do when no write is in flight.
template <typename T>
class HubWriter : public grpc::ServerWriteReactor<T>, public PolledStream {
 public:
  void pump() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (writing_ || finished_) return;
    grpc::Status status;
    switch (next(&msg_, &status)) {
      case Next::kWait:
        return;
      case Next::kWrite:
        writing_ = true;
        lock.unlock();
        this->StartWrite(&msg_);
        return;
      case Next::kFinish:
        finished_ = true;
        lock.unlock();
        this->Finish(status);
        return;
    }
  }
  bool done() const override { return done_.load(); }
  // Refuses the call before anything is written.
  void refuse(const grpc::Status& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    this->Finish(s);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (finished_) return;
      finish = finished_ = !ok || cancelled_;
    }
    if (finish) {
      this->Finish(grpc::Status::CANCELLED);
    } else {
      pump();
    }
  }
  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      if (writing_ || finished_) return;  // the write's completion finishes it
      finished_ = true;
    }
    this->Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override { done_.store(true); }

 protected:
  enum class Next { kWait, kWrite, kFinish };
  // Fills msg (kWrite) or status (kFinish). Called under the stream's lock.
  virtual Next next(T* msg, grpc::Status* status) = 0;


 private:
  std::mutex mu_;
  T msg_;
  bool writing_ = false, finished_ = false, cancelled_ = false;
  std::atomic<bool> done_{false};
};

// The job now, then at each change, until it is terminal.
class JobWatcher final : public HubWriter<v1::Job> {
 public:
  JobWatcher(Supervisor* sup, std::string id) : sup_(sup), id_(std::move(id)) {}

 private:
  Next next(v1::Job* msg, grpc::Status* status) override {
    const uint64_t changes = sup_->changes();
    if (sent_any_ && changes == seen_) return terminal_ ? finish_ok(status) : Next::kWait;
    seen_ = changes;
    absl::StatusOr<v1::Job> job = sup_->get(id_);
    if (!job.ok()) {
      *status = to_grpc(job.status());
      return Next::kFinish;
    }
    terminal_ = is_terminal(job->state());
    std::string bytes = job->SerializeAsString();
    if (sent_any_ && bytes == last_) return terminal_ ? finish_ok(status) : Next::kWait;
    last_ = std::move(bytes);
    sent_any_ = true;
    *msg = *std::move(job);
    return Next::kWrite;
  }
  Next finish_ok(grpc::Status* status) {
    *status = grpc::Status::OK;
    return Next::kFinish;
  }

  Supervisor* sup_;
  std::string id_;
  uint64_t seen_ = 0;
  bool sent_any_ = false, terminal_ = false;
  std::string last_;
};

// A rank's log from an offset; with follow, until the job is over and the
// log read to its end.
class LogStreamer final : public HubWriter<v1::LogChunk> {
 public:
  LogStreamer(Supervisor* sup, const v1::StreamLogsRequest& req, std::string path)
      : sup_(sup), req_(req), path_(std::move(path)), offset_(req.offset()) {}

 private:
  Next next(v1::LogChunk* msg, grpc::Status* status) override {
    for (;;) {
      std::ifstream in(path_, std::ios::binary);
      if (in && in.seekg(offset_)) {
        std::string data(kLogChunkBytes, '\0');
        in.read(data.data(), kLogChunkBytes);
        data.resize(in.gcount());
        if (!data.empty()) {
          msg->set_rank(req_.rank());
          msg->set_offset(offset_);
          offset_ += static_cast<int64_t>(data.size());
          msg->set_data(std::move(data));
          return Next::kWrite;
        }
      }
      // At the end of what is written so far.
      if (!req_.follow() || ended_) {
        *status = grpc::Status::OK;
        return Next::kFinish;
      }
      const uint64_t changes = sup_->changes();
      if (changes == seen_) return Next::kWait;
      seen_ = changes;
      absl::StatusOr<v1::Job> job = sup_->get(req_.job_id());
      if (!job.ok()) {
        *status = to_grpc(job.status());
        return Next::kFinish;
      }
      if (!is_terminal(job->state())) return Next::kWait;
      ended_ = true;  // read once more: the last lines may have landed since
    }
  }

  Supervisor* sup_;
  const v1::StreamLogsRequest req_;
  const std::string path_;
  int64_t offset_;
  uint64_t seen_ = ~uint64_t{0};
  bool ended_ = false;
};

}  // namespace

StreamHub::StreamHub(double period_s) : period_s_(period_s), thread_([this] { loop(); }) {}

StreamHub::~StreamHub() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (PolledStream* s : streams_) delete s;
}

void StreamHub::add(PolledStream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(stream);
}

void StreamHub::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    wake_.wait_for(lock, std::chrono::duration<double>(period_s_));
    std::erase_if(streams_, [](PolledStream* s) {
      if (!s->done()) return false;
      delete s;
      return true;
    });
    for (PolledStream* s : streams_) s->pump();
  }
}

grpc::ServerUnaryReactor* CoordinatorService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                        const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) {
  return unary(ctx, backend_, "SubmitJob", [&](Supervisor& sup) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(v1::Job job, sup.submit(*req));
    resp->set_job_id(job.id());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                     v1::Job* resp) {
  return unary(ctx, backend_, "GetJob", [&](Supervisor& sup) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(*resp, sup.get(req->job_id()));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::ListJobs(grpc::CallbackServerContext* ctx,
                                                       const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) {
  return unary(ctx, backend_, "ListJobs", [&](Supervisor& sup) -> absl::Status {
    std::vector<v1::JobState> states;
    for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
    ZEROD_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, sup.list(states));
    for (v1::Job& j : jobs) *resp->add_jobs() = std::move(j);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CoordinatorService::CancelJob(grpc::CallbackServerContext* ctx,
                                                        const v1::CancelJobRequest* req, v1::Job* resp) {
  return unary(ctx, backend_, "CancelJob", [&](Supervisor& sup) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(*resp, sup.cancel(req->job_id()));
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::Job>* CoordinatorService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                const v1::WatchJobRequest* req) {
  const auto t0 = std::chrono::steady_clock::now();
  Supervisor* sup = nullptr;
  grpc::Status s = admit(*ctx, backend_, &sup);
  count(backend_, "WatchJob", s, t0);
  auto* w = new JobWatcher(sup, req->job_id());
  hub_.add(w);
  if (s.ok()) {
    w->pump();
  } else {
    w->refuse(s);
  }
  return w;
}

grpc::ServerWriteReactor<v1::LogChunk>* CoordinatorService::StreamLogs(grpc::CallbackServerContext* ctx,
                                                                       const v1::StreamLogsRequest* req) {
  const auto t0 = std::chrono::steady_clock::now();
  Supervisor* sup = nullptr;
  grpc::Status s = admit(*ctx, backend_, &sup);
  if (s.ok()) {
    absl::StatusOr<v1::Job> job = sup->get(req->job_id());
    if (!job.ok()) {
      s = to_grpc(job.status());
    } else if (req->rank() < -1 || req->rank() >= job->spec().world_size()) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("job ", job->id(), " has ranks 0 to ", job->spec().world_size() - 1,
                                    " (-1: mpirun's own output), not ", req->rank()));
    } else if (req->offset() < 0) {
      s = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a log offset is 0 or more");
    }
  }
  count(backend_, "StreamLogs", s, t0);
  auto* w = new LogStreamer(sup, *req, s.ok() ? sup->log_path(req->job_id(), req->rank()) : "");
  hub_.add(w);
  if (s.ok()) {
    w->pump();
  } else {
    w->refuse(s);
  }
  return w;
}

grpc::ServerUnaryReactor* WorkerControlService::RegisterWorker(grpc::CallbackServerContext* ctx,
                                                               const v1::RegisterWorkerRequest* req,
                                                               v1::RegisterWorkerResponse* resp) {
  return unary(ctx, backend_, "RegisterWorker", [&](Supervisor& sup) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(*resp, sup.register_worker(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerControlService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                          const v1::HeartbeatRequest* req,
                                                          v1::HeartbeatResponse* resp) {
  return unary(ctx, backend_, "Heartbeat", [&](Supervisor& sup) -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(*resp, sup.heartbeat(*req));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkerControlService::ReportExit(grpc::CallbackServerContext* ctx,
                                                           const v1::ReportExitRequest* req,
                                                           v1::ReportExitResponse*) {
  return unary(ctx, backend_, "ReportExit", [&](Supervisor& sup) { return sup.report_exit(*req); });
}

}  // namespace zerod
