// The worker's side of zerod: when zero-worker runs under zerod (the
// environment names a coordinator), it is a rank's training, started by the
// rank's agent (zero-agent, rank_agent.h) where its output goes to the
// job's rank log. It registers (host, pid, process group; again when a
// restarted zerod asks), heartbeats its progress from a thread of its own,
// and reports its exit; one that zerod tells to stop, or that hears
// nothing from zerod for its lease (ZEROD_LEASE_S), has its agent stop it.
// Started without an agent, it keeps the log and stops itself.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>

namespace zerod {

// run_worker, supervised when ZEROD_COORDINATOR is set. zerod sets, for every
// rank: ZEROD_COORDINATOR (address), ZEROD_JOB_ID, ZEROD_ATTEMPT,
// ZEROD_TOKEN_FILE, ZEROD_LOG_DIR, ZEROD_LEASE_S and, with TLS, ZEROD_TLS_CA.
// `after_step`, if given, runs on the training thread once each step's
// progress is recorded for the next heartbeat (tests make a rank stop
// there, as one stuck in a collective would).
using AfterStep = std::function<void(int attempt, int rank, int64_t step)>;
int run_supervised_worker(int argc, char** argv, std::ostream& out, std::ostream& err, AfterStep after_step = {});

}  // namespace zerod
