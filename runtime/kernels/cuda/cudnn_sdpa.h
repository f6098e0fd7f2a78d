// cuDNN's fused causal attention for the CUDA table: sdpa_graph.h's graphs
// handed to cuDNN's backend API, one execution plan a shape and direction
// (built at its first use and kept, or its refusal kept), run on the
// table's stream. Built where CMake finds cuDNN (ZEROD_WITH_CUDNN); the
// table falls back to its own attention for whatever cuDNN refuses.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/kernels/cuda/sdpa_graph.h"

namespace zerod::cuda {

// Every tensor and operation of g as cuDNN backend descriptors, each
// finalized: all of a graph that cuDNN checks without a GPU (the graph
// itself takes a handle, which takes one). The first refusal names the
// tensor or operation and cuDNN's reason.
absl::Status sdpa_check_descriptors(const SdpaGraph& g);

class CudnnSdpa {
 public:
  // On the current device.
  static absl::StatusOr<std::unique_ptr<CudnnSdpa>> create();
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // The workspace bytes, at most `room`, of the plan for s's forward or
  // backward graph (made at its first call: the heuristics' first engine
  // that is deterministic and fits); or why cuDNN has none (asked again,
  // the same answer: a shape's room is always the same).
  absl::StatusOr<int64_t> prepare(const SdpaShape& s, bool backward, int64_t room);
  // Keeps `why` as the answer for s from now on, and says it on stderr
  // (also what prepare does with its own refusals).
  void refuse(const SdpaShape& s, bool backward, absl::Status why);
  // Runs a prepared plan on stream: `buffers` the device pointer of each
  // handed-over tensor but the scalars (sdpa_offset included), `workspace`
  // at least prepare's bytes.
  absl::Status run(const SdpaShape& s, bool backward, cudaStream_t stream,
                   const std::vector<std::pair<int64_t, void*>>& buffers, void* workspace);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, SdpaType, bool>;

  CudnnSdpa() = default;

  cudnnHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, absl::Status> refused_;
};

}  // namespace zerod::cuda
