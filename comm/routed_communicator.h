// Two communicators over the same ranks behind one: a collective whose
// buffers are all the device's own memory goes to the device's (NCCL on a
// GPU), every other to the host's (MPI, or MPI through staging). Each of
// the two sees its collectives in issue order, which is the same on every
// rank because every rank allocates the same buffers in the same places.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "runtime/core/device.h"

namespace zerod {

// `device` outlives the communicator; `on_device` is destroyed first.
std::unique_ptr<Communicator> make_routed_communicator(std::unique_ptr<Communicator> on_device,
                                                       std::unique_ptr<Communicator> on_host, const Device& device);

}  // namespace zerod
