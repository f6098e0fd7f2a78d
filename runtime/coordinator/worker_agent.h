// The worker's side of zerod: when zero-worker runs under zerod (the
// environment names a coordinator), its output goes to the job's rank log,
// it registers, heartbeats its progress from a thread of its own, and
// reports its exit. A worker zerod tells to stop terminates itself.
#pragma once

#include <ostream>

namespace zerod {

// run_worker, supervised when ZEROD_COORDINATOR is set. zerod sets, for every
// rank: ZEROD_COORDINATOR (address), ZEROD_JOB_ID, ZEROD_ATTEMPT,
// ZEROD_TOKEN_FILE, ZEROD_LOG_DIR and, with TLS, ZEROD_TLS_CA.
//
// Test hook: ZEROD_TEST_HANG="attempt:rank:step" makes that rank of that
// attempt stop, still heartbeating, after that step (a worker stuck in a
// collective, as zerod sees it).
int run_supervised_worker(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace zerod
