#include "runtime/telemetry/event_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/core/status.h"
#include "runtime/core/whole_file.h"
#include "runtime/telemetry/output_files.h"
#include "runtime/telemetry/tensorboard_event.pb.h"
#include "runtime/telemetry/tfrecord.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

std::string framed(const tensorboard::Event& e) { return tfrecord(e.SerializeAsString()); }

// Cuts `path` after its last record at or before `step`, and before a torn
// or unreadable one.
absl::Status cut_records_after(const std::string& path, int64_t step) {
  const std::optional<std::string> bytes = read_whole_file(path);
  if (!bytes) return file_error("cannot read the event file", path);
  const TfRecords r = read_tfrecords(*bytes);
  uint64_t keep = 0;
  for (size_t i = 0; i < r.records.size(); ++i) {
    tensorboard::Event e;
    if (!e.ParseFromArray(r.records[i].data(), static_cast<int>(r.records[i].size())) || e.step() > step) break;
    keep = r.ends[i];
  }
  if (keep == bytes->size()) return absl::OkStatus();
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) return file_error("cannot cut the event file", path);
  return absl::OkStatus();
}

// The event files of `dir` zerod wrote, oldest first.
std::vector<std::string> zerod_event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && absl::StrContains(name, "tfevents") && absl::EndsWith(name, ".zerod")) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());  // the names start with their time
  return files;
}

// TensorBoard's first record of a file.
std::string file_version_record(double wall_time) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return framed(e);
}

}  // namespace

absl::StatusOr<EventFileWriter> EventFileWriter::open(const std::string& dir, std::optional<int64_t> resumed_at,
                                                      double wall_time) {
  ZEROD_RETURN_IF_ERROR(create_output_dir(dir));
  if (resumed_at) {
    const std::vector<std::string> files = zerod_event_files(dir);
    for (const std::string& f : files) ZEROD_RETURN_IF_ERROR(cut_records_after(f, *resumed_at));
    if (!files.empty()) {
      FILE* f = std::fopen(files.back().c_str(), "ab");
      if (!f) return file_error("cannot append to the event file", files.back());
      EventFileWriter w(files.back(), f);
      // A file cut to nothing (its first record torn) starts again.
      std::error_code ec;
      if (fs::file_size(files.back(), ec) == 0 && !ec) ZEROD_RETURN_IF_ERROR(w.append(file_version_record(wall_time)));
      return w;
    }
  }
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  // TensorBoard's own naming, then the writer's pid, a count that makes the
  // name new (a second run in the same second and process) and ".zerod".
  std::string path;
  FILE* f = nullptr;
  for (int n = 0; !f; ++n) {
    path = (fs::path(dir) / absl::StrFormat("events.out.tfevents.%010d.%s.%d.%d.zerod", static_cast<int64_t>(wall_time),
                                            host, getpid(), n))
               .string();
    f = std::fopen(path.c_str(), "wbx");
    if (!f && errno != EEXIST) return file_error("cannot create the event file", path);
  }
  EventFileWriter w(path, f);
  ZEROD_RETURN_IF_ERROR(w.append(file_version_record(wall_time)));
  ZEROD_RETURN_IF_ERROR(w.flush());
  return w;
}

absl::Status EventFileWriter::append(const std::string& record) {
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
    return file_error("cannot write the event file", path_);
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::write(int64_t step, double wall_time, const std::vector<Scalar>& scalars) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  tensorboard::Summary* s = e.mutable_summary();
  for (const Scalar& x : scalars) {
    tensorboard::Summary::Value* v = s->add_value();
    v->set_tag(x.tag);
    v->set_simple_value(static_cast<float>(x.value));
  }
  return append(framed(e));
}

absl::Status EventFileWriter::flush() {
  if (std::fflush(file_.get()) != 0) return file_error("cannot write the event file", path_);
  return absl::OkStatus();
}

}  // namespace zerod
