// The exit status of zero-worker, which zerod and zeroctl read and give too.
#pragma once

namespace zerod {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the run failed
inline constexpr int kExitBadInput = 2;  // config, data, arguments or request refused

}  // namespace zerod
