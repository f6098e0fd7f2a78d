// zero-agent: the process mpirun starts for each rank of a job under
// zerod (`mpirun ... zero-agent zero-worker --config ...`). It runs the
// rank's training, the rest of its command line, as its child, passes on
// the signals it gets, and outlives it: when the kernel kills the
// training, the agent reports from the rank's own host how (the signal,
// and whether the OOM killer counted a kill in the memory cgroup they
// share), to zerod and in the rank's exit record, then ends by the same
// signal, so mpirun sees the rank die as it did. A small program, so that
// it costs its host little next to the training.
#pragma once

namespace zerod {

// argv: zero-agent PROGRAM [ARGS...]. PROGRAM's exit status, or the
// agent's death by its signal; 127 when PROGRAM cannot be started, 2 on
// bad use.
int run_rank_agent(int argc, char** argv);

}  // namespace zerod
