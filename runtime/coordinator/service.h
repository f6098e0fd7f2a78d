// The gRPC face of the coordinator, on the callback API: the Coordinator
// service (users, zeroctl) and the WorkerControl service (a job's workers).
// Every call must carry the bearer token. Streams (WatchJob, StreamLogs) are
// pumped by one StreamHub thread, so a stream waiting for news holds no
// thread of its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "proto/zerod.grpc.pb.h"
#include "runtime/coordinator/metrics_text.h"
#include "runtime/coordinator/supervisor.h"

namespace zerod {

// A server stream that writes whenever it has something new.
class PolledStream {
 public:
  virtual ~PolledStream() = default;
  // Starts the next write, or finishes, if there is news and no write is in flight.
  virtual void pump() = 0;
  // gRPC is done with it: it may be deleted.
  virtual bool done() const = 0;
};

// Pumps its streams every `period_s` and deletes those gRPC is done with.
class StreamHub {
 public:
  explicit StreamHub(double period_s);
  ~StreamHub();  // after the server has shut down
  void add(PolledStream* stream);

 private:
  void loop();
  const double period_s_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::vector<PolledStream*> streams_;
  std::thread thread_;
};

// The supervisor behind both services (and the HTTP frontend); calls wait
// with UNAVAILABLE until it is set. Every request is counted in `stats`.
struct Backend {
  std::atomic<Supervisor*> supervisor{nullptr};
  std::string token;
  RequestStats stats;
};

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Backend& backend, StreamHub& hub) : backend_(backend), hub_(hub) {}
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                      v1::Job* resp) override;
  grpc::ServerWriteReactor<v1::Job>* WatchJob(grpc::CallbackServerContext* ctx,
                                              const v1::WatchJobRequest* req) override;
  grpc::ServerWriteReactor<v1::LogChunk>* StreamLogs(grpc::CallbackServerContext* ctx,
                                                     const v1::StreamLogsRequest* req) override;

 private:
  Backend& backend_;
  StreamHub& hub_;
};

class WorkerControlService final : public v1::WorkerControl::CallbackService {
 public:
  explicit WorkerControlService(Backend& backend) : backend_(backend) {}
  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx, const v1::RegisterWorkerRequest* req,
                                           v1::RegisterWorkerResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* ReportExit(grpc::CallbackServerContext* ctx, const v1::ReportExitRequest* req,
                                       v1::ReportExitResponse* resp) override;

 private:
  Backend& backend_;
};

}  // namespace zerod
