// Collectives on a GPU's memory through a communicator that reaches only
// host memory (MPI). Each buffer in the device's own memory is copied to a
// host staging buffer (pinned on a GPU) before the collective and back into
// place after it, on a stream of its own; host buffers go straight through.
// Ranks that share one GPU, and builds without NCCL, train on GPUs this way.
//
// Every collective, staged or not, runs on one thread in issue order, so
// the inner communicator sees the same order on every rank; its timeout and
// its naming of a stuck collective and the missing ranks are what a wait
// reports.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "runtime/core/device.h"

namespace zerod {

// `inner` and `device` outlive the communicator.
std::unique_ptr<Communicator> make_staged_communicator(Communicator& inner, Device& device);
// The same, owning `inner`.
std::unique_ptr<Communicator> make_staged_communicator(std::unique_ptr<Communicator> inner, Device& device);

}  // namespace zerod
