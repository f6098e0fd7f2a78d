// The exit status of zero-worker, which zerod and zeroctl read and give too.
#pragma once

#include "absl/status/status.h"

namespace zerod {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the run failed
inline constexpr int kExitBadInput = 2;  // config, data, arguments or request refused

// A failure's exit status by its kind. Bad input is what the caller can
// fix by giving something else: a value refused, a file missing, of the
// wrong kind, corrupt (DataLoss: bytes that are not what they claim),
// forbidden, or asking for what this build or machine does not have. The
// rest is the run's: I/O errors (EIO is Unknown, ENOSPC ResourceExhausted),
// memory, peers, timeouts, bugs. Errors from errno keep its kind
// (absl::ErrnoToStatus), so a path that cannot be opened is bad input and
// a disk failing under it is not.
int exit_code_for(absl::StatusCode code);
inline int exit_code_for(const absl::Status& s) { return exit_code_for(s.code()); }

}  // namespace zerod
