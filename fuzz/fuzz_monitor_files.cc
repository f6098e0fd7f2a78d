// The files a resumed run's monitors cut and append to: whatever bytes an
// earlier event file and CSV file hold, the cut keeps a prefix of them made
// of whole records (rows) at or before the resumed step, and appends after
// it. The input: a byte for the step (0-255), the event file, a NUL, the CSV file.
#include <cstdlib>
#include <filesystem>

#include "fuzz/fuzz_input.h"
#include "runtime/core/whole_file.h"
#include "runtime/telemetry/csv_files.h"
#include "runtime/telemetry/event_file.h"
#include "runtime/telemetry/tensorboard_event.pb.h"
#include "runtime/telemetry/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t step = data[0];
  const auto parts = zerod::fuzz::split_at_nul(data + 1, size - 1, 2);
  const std::string dir = zerod::fuzz::scratch_dir() + "/run";
  std::filesystem::remove_all(dir);
  const std::string events = zerod::fuzz::write_scratch("run/events.out.tfevents.1.host.1.0.zerod", parts[0]);
  const std::string csv =
      zerod::fuzz::write_scratch("run/Train_Samples_train_loss.csv", parts.size() > 1 ? parts[1] : "");

  auto w = zerod::EventFileWriter::open(dir, step, 1.0);
  if (!w.ok()) abort();  // every file here can be read and cut
  const std::string kept = *zerod::read_whole_file(events);
  if (std::string_view(parts[0]).substr(0, kept.size()) != kept) abort();
  const zerod::TfRecords r = zerod::read_tfrecords(kept);
  if (!r.problem.empty()) abort();
  for (std::string_view record : r.records) {
    zerod::tensorboard::Event e;
    if (!e.ParseFromArray(record.data(), static_cast<int>(record.size())) || e.step() > step) abort();
  }
  if (!w->write(step + 1, 2.0, {{"Train/Samples/train_loss", 0.5}}).ok() || !w->flush().ok()) abort();
  // One more record, and TensorBoard's first one again where the cut left nothing.
  const size_t added = kept.empty() ? 2 : 1;
  if (zerod::read_tfrecords(*zerod::read_whole_file(events)).records.size() != r.records.size() + added) abort();

  auto c = zerod::CsvFiles::open(dir, step);
  if (!c.ok()) abort();
  const std::string rows = *zerod::read_whole_file(csv);
  if (parts.size() > 1 && std::string_view(parts[1]).substr(0, rows.size()) != rows) abort();
  if (!rows.empty() && rows.back() != '\n') abort();  // whole lines only
  return 0;
}
