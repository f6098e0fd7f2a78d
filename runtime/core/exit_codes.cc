#include "runtime/core/exit_codes.h"

namespace zerod {

int exit_code_for(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kDataLoss:
      return kExitBadInput;
    default:  // Cancelled, Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Internal, Unavailable
      return kExitFailure;
  }
}

}  // namespace zerod
