// DeepSpeed's csv_monitor layout: a file a figure in one directory, named
// for its tag with '/' and ' ' as '_' (Train_Samples_train_loss.csv), a
// header "step,<the tag's last part>", then a "step,value" row a step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/telemetry/event_file.h"

namespace zerod {

class CsvFiles {
 public:
  // Opens `dir` (created where missing). A run resumed after `resumed_at`
  // cuts each CSV file there after its last row at or before that step
  // (and before a row cut short), then appends.
  static absl::StatusOr<CsvFiles> open(const std::string& dir, std::optional<int64_t> resumed_at);

  absl::Status write(int64_t step, const std::vector<Scalar>& scalars);
  absl::Status flush();

  // The file a tag's rows go to.
  static std::string file_name(const std::string& tag);

 private:
  struct Close {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  explicit CsvFiles(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
  std::map<std::string, std::unique_ptr<FILE, Close>> files_;  // by tag
};

}  // namespace zerod
