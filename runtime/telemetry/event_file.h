// TensorBoard's event files, written by zerod: TFRecord framing around
// Event records of scalars (tensorboard_event.proto). TensorBoard reads
// every file in a directory whose name holds "tfevents"; zerod's end in
// ".zerod", and only those does a resumed run touch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace zerod {

struct Scalar {
  std::string tag;
  double value;
};

class EventFileWriter {
 public:
  // Opens `dir` (created where missing). A fresh run (`resumed_at` empty)
  // starts a new file with TensorBoard's file_version record. A run resumed
  // after the record whose step is *resumed_at cuts zerod's files there
  // (what a run past the checkpoint wrote would else be there twice, and a
  // torn last record goes too) and appends to the newest.
  static absl::StatusOr<EventFileWriter> open(const std::string& dir, std::optional<int64_t> resumed_at,
                                              double wall_time);

  // One Event of these scalars at `step` (float, as TensorBoard keeps them).
  absl::Status write(int64_t step, double wall_time, const std::vector<Scalar>& scalars);
  // What is written reaches the file, for TensorBoard to read.
  absl::Status flush();

 private:
  struct Close {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  EventFileWriter(std::string path, FILE* f) : path_(std::move(path)), file_(f) {}
  absl::Status append(const std::string& record);

  std::string path_;
  std::unique_ptr<FILE, Close> file_;
};

}  // namespace zerod
