// A job submitted to zerod: the protobuf bytes of a SubmitJobRequest, parsed
// as gRPC would and checked as the service checks them before recording it.
#include <google/protobuf/stubs/logging.h>

#include "fuzz/fuzz_input.h"
#include "runtime/coordinator/job_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // protobuf logs every string field that is not UTF-8; the parse fails all the same.
  [[maybe_unused]] static const auto quiet = google::protobuf::SetLogHandler(nullptr);
  zerod::v1::SubmitJobRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  zerod::JobRules rules;
  rules.slots = 4;
  rules.allowed_roots = {zerod::fuzz::scratch_dir()};
  zerod::prepare_job(request, rules).IgnoreError();
  return 0;
}
