// cuDNN's fused causal attention for the CUDA table: sdpa_graph.h's graphs
// handed to cuDNN's backend API, one execution plan a shape and direction
// (built at its first use and kept, or its refusal kept), run on the
// table's stream. Built where CMake finds cuDNN (ZEROD_WITH_CUDNN); the
// table falls back to its own attention for whatever cuDNN refuses.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <functional>
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

  // The part of s one call takes (sdpa_split: all of it where a plan for
  // the whole fits), the plan of such a part made at its first call (the
  // heuristics' first engine that is deterministic and within room(n, m)
  // bytes of workspace, for n sequences of m heads) and kept; or why none
  // runs. Asked again, the same answer (a shape's room is always the
  // same); said once on stderr where s runs in parts or unfused.
  absl::StatusOr<SdpaSplit> split(const SdpaShape& s, bool backward, const std::function<int64_t(int, int)>& room);
  // Keeps `why` as the answer for s from now on, and says it on stderr.
  void refuse(const SdpaShape& s, bool backward, absl::Status why);
  // Runs the plan of a part (s.B and s.heads its own) on stream: `buffers`
  // the device pointer of each handed-over tensor but the scalars
  // (sdpa_offset and sdpa_part_offset included), `workspace` at least its
  // plan's bytes.
  absl::Status run(const SdpaShape& s, bool backward, cudaStream_t stream,
                   const std::vector<std::pair<int64_t, void*>>& buffers, void* workspace);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, int, int, SdpaType, bool, bool>;
  static Key key(const SdpaShape& s, bool backward) {
    return {s.B, s.T, s.C, s.NH, s.KV, s.heads, s.io, s.packed, backward};
  }

  CudnnSdpa() = default;
  // The plan for s within `room` bytes of workspace, or why there is none;
  // either kept, neither said.
  absl::StatusOr<int64_t> plan(const SdpaShape& s, bool backward, int64_t room);

  cudnnHandle_t handle_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, absl::Status> refused_;
  std::map<Key, absl::StatusOr<SdpaSplit>> splits_;  // by whole shape
};

}  // namespace zerod::cuda
