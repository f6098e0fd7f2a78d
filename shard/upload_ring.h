// fp32 values computed on the host (master weights) written into device
// memory as another float type. They are converted into a small ring of
// host buffers (workspace; pinned on a GPU) and copied on a stream of the
// ring's own, so that the copy of one part overlaps the conversion of the
// next and the host's work after it. Copies start after the work queued on
// the compute stream before them, and flush() waits for all of them.
#pragma once

#include <memory>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory_plan.h"

namespace zerod {

class UploadRing {
 public:
  // Its buffers (of `tier`) are allocated on first use, on a device the host
  // cannot reach (elsewhere the values are written in place).
  UploadRing(Device& device, Tier tier) : device_(device), tier_(tier) {}
  // Those buffers.
  static BufferSpec buffers(Tier tier);
  ~UploadRing() { flush().IgnoreError(); }

  // n values at src, converted to `dtype`, into device memory at dst.
  absl::Status write(void* dst, DType dtype, const float* src, int64_t n);
  // Every copy is done: the compute stream may read what they wrote.
  absl::Status flush();

 private:
  struct Part {
    Buffer buf;
    std::unique_ptr<Event> copied;  // its last copy
  };
  absl::Status allocate();

  Device& device_;
  const Tier tier_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> start_;  // on the compute stream: what the copies come after
  std::vector<Part> parts_;
  size_t next_ = 0;
  bool open_ = false;  // copies enqueued since the last flush
};

}  // namespace zerod
