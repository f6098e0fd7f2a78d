// zero-agent: a rank's agent on its host, under zerod (rank_agent.h).
#include "runtime/coordinator/rank_agent.h"

int main(int argc, char** argv) { return zerod::run_rank_agent(argc, argv); }
