#include "runtime/telemetry/csv_files.h"

#include <unistd.h>

#include <charconv>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "runtime/core/status.h"
#include "runtime/core/whole_file.h"
#include "runtime/telemetry/output_files.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;

// Cuts a CSV file after its header and its rows up to `step`, and before
// the first row that is cut short or not "step,value".
absl::Status cut_rows_after(const std::string& path, int64_t step) {
  const std::optional<std::string> text = read_whole_file(path);
  if (!text) return file_error("cannot read the CSV file", path);
  size_t keep = 0, at = 0;
  for (bool header = true; at < text->size(); header = false) {
    const size_t end = text->find('\n', at);
    if (end == std::string::npos) break;
    const std::string_view line(text->data() + at, end - at);
    const std::string_view cell = line.substr(0, line.find(','));
    int64_t row_step = 0;
    const auto parsed = std::from_chars(cell.data(), cell.data() + cell.size(), row_step);
    if (!header && (parsed.ec != std::errc() || parsed.ptr != cell.data() + cell.size() || row_step > step)) break;
    at = keep = end + 1;
  }
  if (keep == text->size()) return absl::OkStatus();
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) return file_error("cannot cut the CSV file", path);
  return absl::OkStatus();
}

// The shortest text that reads back as the same double.
std::string shortest(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string CsvFiles::file_name(const std::string& tag) {
  return absl::StrReplaceAll(tag, {{"/", "_"}, {" ", "_"}}) + ".csv";
}

absl::StatusOr<CsvFiles> CsvFiles::open(const std::string& dir, std::optional<int64_t> resumed_at) {
  ZEROD_RETURN_IF_ERROR(create_output_dir(dir));
  if (resumed_at) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec) && e.path().extension() == ".csv") {
        ZEROD_RETURN_IF_ERROR(cut_rows_after(e.path().string(), *resumed_at));
      }
    }
  }
  return CsvFiles(dir);
}

absl::Status CsvFiles::write(int64_t step, const std::vector<Scalar>& scalars) {
  for (const Scalar& s : scalars) {
    auto it = files_.find(s.tag);
    if (it == files_.end()) {
      const std::string path = (fs::path(dir_) / file_name(s.tag)).string();
      std::error_code ec;
      const bool fresh = !fs::exists(path, ec) || fs::file_size(path, ec) == 0;
      FILE* f = std::fopen(path.c_str(), "a");
      if (!f) return file_error("cannot open the CSV file", path);
      it = files_.emplace(s.tag, f).first;
      // The header once, in a file that has none yet.
      if (fresh) {
        const size_t slash = s.tag.rfind('/');
        std::fprintf(f, "step,%s\n", s.tag.substr(slash == std::string::npos ? 0 : slash + 1).c_str());
      }
    }
    if (std::fprintf(it->second.get(), "%lld,%s\n", static_cast<long long>(step), shortest(s.value).c_str()) < 0) {
      return file_error("cannot write the CSV file", (fs::path(dir_) / file_name(s.tag)).string());
    }
  }
  return absl::OkStatus();
}

absl::Status CsvFiles::flush() {
  for (auto& [tag, f] : files_) {
    if (std::fflush(f.get()) != 0)
      return file_error("cannot write the CSV file", (fs::path(dir_) / file_name(tag)).string());
  }
  return absl::OkStatus();
}

}  // namespace zerod
