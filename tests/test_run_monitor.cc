// TensorBoard event files and DeepSpeed's CSV files from a run, read back
// by a reader of the test's own (TFRecord framing, a bitwise CRC-32C and a
// protobuf wire decoder with TensorBoard's field numbers) against the run's
// JSON step events; resumed runs; refused configs and paths.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "runtime/core/device.h"
#include "runtime/core/exit_codes.h"
#include "runtime/telemetry/tfrecord.h"
#include "tests/temp_dir.h"
#include "tests/test_support.h"
#include "tests/worker_run.h"

namespace zerod {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::events;
using testing::of_kind;

// CRC-32C one bit at a time (the reflected Castagnoli polynomial), and
// TFRecord's mask, as TensorBoard's format describes them.
uint32_t bitwise_crc32c(const std::string& s) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

// The records of an event file; every length and data CRC checked.
std::vector<std::string> records(const std::string& file) {
  const std::string s = testing::read_file(file);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_GE(s.size() - at, 16u) << file << " at " << at;
    if (s.size() - at < 16) break;
    const uint64_t n = le(s, at, 8);
    EXPECT_EQ(le(s, at + 8, 4), masked(bitwise_crc32c(s.substr(at, 8)))) << "length CRC at " << at;
    const std::string data = s.substr(at + 12, n);
    EXPECT_EQ(le(s, at + 12 + n, 4), masked(bitwise_crc32c(data))) << "data CRC at " << at;
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

// Protobuf's wire format: (field, wire type, value) triples of a message.
struct Field {
  int number, type;
  uint64_t varint = 0;
  std::string bytes;  // length-delimited, or the 4 or 8 bytes of a fixed field
};
uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(at++));
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}
std::vector<Field> fields(const std::string& s) {
  std::vector<Field> out;
  for (size_t at = 0; at < s.size();) {
    const uint64_t key = varint(s, at);
    Field f{static_cast<int>(key >> 3), static_cast<int>(key & 7)};
    if (f.type == 0) {
      f.varint = varint(s, at);
    } else if (f.type == 1 || f.type == 5) {
      f.bytes = s.substr(at, f.type == 1 ? 8 : 4);
      at += f.bytes.size();
    } else {
      EXPECT_EQ(f.type, 2) << "wire type";
      const uint64_t n = varint(s, at);
      f.bytes = s.substr(at, n);
      at += n;
    }
    out.push_back(f);
  }
  return out;
}

// TensorBoard's Event: wall_time 1 (double), step 2, file_version 3,
// summary 5 of Values (tag 1, simple_value 2, a float).
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};
Event decode(const std::string& record) {
  Event e;
  for (const Field& f : fields(record)) {
    if (f.number == 1) {
      EXPECT_EQ(f.type, 1);
      std::memcpy(&e.wall_time, f.bytes.data(), 8);
    } else if (f.number == 2) {
      e.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3) {
      e.file_version = f.bytes;
    } else if (f.number == 5) {
      for (const Field& v : fields(f.bytes)) {
        EXPECT_EQ(v.number, 1);
        std::string tag;
        float value = NAN;
        for (const Field& x : fields(v.bytes)) {
          if (x.number == 1) tag = x.bytes;
          if (x.number == 2) {
            EXPECT_EQ(x.type, 5);
            std::memcpy(&value, x.bytes.data(), 4);
          }
        }
        e.scalars[tag] = value;
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << f.number;
    }
  }
  return e;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (absl::StrContains(e.path().filename().string(), "tfevents")) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The Events of every event file in `dir`, file_version records left out.
std::vector<Event> scalar_events(const std::string& dir) {
  std::vector<Event> out;
  for (const std::string& f : event_files(dir)) {
    const std::vector<std::string> r = records(f);
    EXPECT_FALSE(r.empty()) << f;
    if (r.empty()) continue;
    EXPECT_EQ(decode(r[0]).file_version, "brain.Event:2") << f;
    for (size_t i = 1; i < r.size(); ++i) out.push_back(decode(r[i]));
  }
  return out;
}

// A CSV file's rows after its header: (step, value).
std::vector<std::pair<int64_t, double>> csv_rows(const std::string& file, const std::string& header) {
  std::vector<std::string> lines = absl::StrSplit(testing::read_file(file), '\n', absl::SkipEmpty());
  EXPECT_FALSE(lines.empty()) << file;
  if (lines.empty()) return {};
  EXPECT_EQ(lines[0], header) << file;
  std::vector<std::pair<int64_t, double>> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    EXPECT_EQ(cells.size(), 2u) << lines[i];
    rows.emplace_back(std::stoll(cells[0]), std::strtod(cells[1].c_str(), nullptr));
  }
  return rows;
}

json small_job() {
  return {{"model", {{"preset", "gpt2-tiny"}}},
          {"data", {{"kind", "synthetic"}, {"seq_len", 16}}},
          {"run", {{"steps", 6}, {"seed", 3}, {"device", "cpu"}, {"sample", {{"tokens", 0}}}}},
          {"train_batch_size", 4},
          {"steps_per_print", 1},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}}};
}

class RunMonitorTest : public testing::TempDirTest {
 protected:
  testing::WorkerResult run(const json& j, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--config", write("job.json", j.dump()), "--log-format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_worker_with(args);
  }
  json monitored() {
    json j = small_job();
    j["tensorboard"] = {{"enabled", true}, {"output_path", path("tb")}, {"job_name", "job"}};
    j["csv_monitor"] = {{"enabled", true}, {"output_path", path("csv")}, {"job_name", "job"}};
    return j;
  }
};

// The framing itself against the CRC's published check value.
TEST(TfRecord, FramesWithMaskedCrc32cAndReadsBackUpToATornTail) {
  EXPECT_EQ(bitwise_crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(masked_crc32c("123456789", 9), masked(0xe3069283u));
  const std::string a = tfrecord("hello"), b = tfrecord(std::string(300, 'x'));
  ASSERT_EQ(a.size(), 12u + 5 + 4);
  EXPECT_EQ(le(a, 0, 8), 5u);
  EXPECT_EQ(le(a, 8, 4), masked(bitwise_crc32c(a.substr(0, 8))));
  EXPECT_EQ(le(a, 17, 4), masked(bitwise_crc32c("hello")));
  const std::string both = a + b;
  TfRecords r = read_tfrecords(both);
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0], "hello");
  EXPECT_EQ(r.ends, (std::vector<uint64_t>{a.size(), both.size()}));
  EXPECT_EQ(r.problem, "");
  // Cut anywhere inside the second record, or a bit flipped in it: the first alone.
  for (size_t cut : {a.size() + 3, a.size() + 12, both.size() - 1}) {
    r = read_tfrecords(std::string_view(both).substr(0, cut));
    EXPECT_EQ(r.records.size(), 1u) << cut;
    EXPECT_NE(r.problem, "") << cut;
  }
  for (size_t at : {a.size() + 2, a.size() + 9, a.size() + 100, both.size() - 2}) {
    std::string bad = both;
    bad[at] ^= 0x10;
    r = read_tfrecords(bad);
    EXPECT_EQ(r.records.size(), 1u) << at;
    EXPECT_NE(r.problem, "") << at;
  }
}

TEST(PeakFlops, DatasheetFiguresForKnownPartsAndSmsTimesClockOtherwise) {
  EXPECT_EQ(dense_16bit_peak_flops(9, 0, 132, 1.98e9), 989.4e12);  // H100 SXM, H200
  EXPECT_EQ(dense_16bit_peak_flops(9, 0, 114, 1.755e9), 756.5e12);
  EXPECT_EQ(dense_16bit_peak_flops(8, 0, 108, 1.41e9), 312e12);
  EXPECT_EQ(dense_16bit_peak_flops(9, 0, 78, 1.5e9), 4096.0 * 78 * 1.5e9);
  EXPECT_EQ(dense_16bit_peak_flops(8, 0, 56, 1.0e9), 2048.0 * 56 * 1.0e9);
  EXPECT_EQ(dense_16bit_peak_flops(7, 5, 40, 1.5e9), 0.0);
}

// Every step's figures in both forms, equal to the step events' (as float
// in TensorBoard, exactly in the CSV files), at DeepSpeed's x-axis.
TEST_F(RunMonitorTest, EventAndCsvFilesHoldTheStepEventsFigures) {
  json j = monitored();
  j["wall_clock_breakdown"] = true;
  const testing::WorkerResult r = run(j);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<json> all = events(r.out), steps = of_kind(all, "step");
  ASSERT_EQ(steps.size(), 6u);
  const json start = of_kind(all, "start")[0];
  const double flops_per_token = 6.0 * start["params"].get<double>() + 6.0 * 2 * 64 * 16;
  EXPECT_EQ(start["mfu"]["flops_per_token"].get<double>(), flops_per_token);
  const double peak = start["mfu"]["peak_flops"].get<double>();
  EXPECT_GT(peak, 1e8);
  ASSERT_EQ(event_files(path("tb/job")).size(), 1u);
  const std::vector<Event> tb = scalar_events(path("tb/job"));
  ASSERT_EQ(tb.size(), 6u);
  const std::string p = "Train/Samples/";
  for (size_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(i);
    const json& s = steps[i];
    const Event& e = tb[i];
    EXPECT_EQ(e.step, 4 * static_cast<int64_t>(i + 1));  // samples: steps x train_batch_size
    EXPECT_GT(e.wall_time, 1.7e9);
    EXPECT_EQ(e.scalars.at(p + "train_loss"), static_cast<float>(s["loss"].get<double>()));
    EXPECT_EQ(e.scalars.at(p + "lr"), static_cast<float>(s["lr"].get<double>()));
    EXPECT_EQ(e.scalars.at(p + "grad_norm"), static_cast<float>(s["grad_norm"].get<double>()));
    EXPECT_EQ(e.scalars.at(p + "tokens_per_s"), static_cast<float>(s["tokens_per_s"].get<double>()));
    EXPECT_EQ(e.scalars.count(p + "loss_scale"), 0u);  // fp16 only, as DeepSpeed
    // MFU: 6N + 6 L C T FLOPs a token (gpt2-tiny: 2 layers of 64, T 16)
    // over the CPU's sgemm rate, measured once at the start.
    const double mfu = s["mfu"].get<double>();
    EXPECT_EQ(e.scalars.at(p + "mfu"), static_cast<float>(mfu));
    EXPECT_NEAR(mfu, flops_per_token * s["tokens_per_s"].get<double>() / peak, 1e-12 * mfu);
    for (const char* tier : {"gpu", "pinned", "host", "nvme"}) {
      EXPECT_EQ(e.scalars.at(p + "memory_" + tier + "_bytes"), static_cast<float>(s["memory"][tier].get<double>()));
    }
    EXPECT_GT(s["memory"]["host"].get<double>(), 0);
    EXPECT_GT(e.scalars.at(p + "elapsed_time_ms_step"), 0.0f);
    EXPECT_TRUE(e.scalars.count(p + "elapsed_time_ms_device_matmul_forward")) << "device parts";
  }
  // The CSV files: DeepSpeed's names and header, the JSON's doubles exactly.
  const std::string csv = path("csv/job");
  for (const auto& [file, header, key] : {std::tuple{"Train_Samples_train_loss.csv", "step,train_loss", "loss"},
                                          {"Train_Samples_lr.csv", "step,lr", "lr"},
                                          {"Train_Samples_tokens_per_s.csv", "step,tokens_per_s", "tokens_per_s"},
                                          {"Train_Samples_mfu.csv", "step,mfu", "mfu"}}) {
    const auto rows = csv_rows(csv + "/" + file, header);
    ASSERT_EQ(rows.size(), 6u) << file;
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(rows[i].first, 4 * static_cast<int64_t>(i + 1)) << file;
      EXPECT_EQ(rows[i].second, steps[i][key].get<double>()) << file << " row " << i;
    }
  }
  EXPECT_TRUE(fs::exists(csv + "/Train_Samples_memory_host_bytes.csv"));
}

// A held-out set evaluated every second step: its loss and perplexity as
// Eval/Samples/ scalars at those steps' samples, in the event file and in
// DeepSpeed-named CSV files, the JSON eval events' values.
TEST_F(RunMonitorTest, HeldOutLossesAreEvalScalarsAtTheirSteps) {
  json j = monitored();
  j["data"]["eval"] = {{"fraction", 0.1}};
  j["run"]["eval"] = {{"interval", 2}};
  const testing::WorkerResult r = run(j);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<json> evals = of_kind(events(r.out), "eval");
  ASSERT_EQ(evals.size(), 3u);
  std::vector<Event> tb;
  for (const Event& e : scalar_events(path("tb/job"))) {
    if (e.scalars.count("Eval/Samples/eval_loss")) tb.push_back(e);
  }
  ASSERT_EQ(tb.size(), 3u);
  const auto eval_rows = csv_rows(path("csv/job/Eval_Samples_eval_loss.csv"), "step,eval_loss");
  const auto ppl_rows = csv_rows(path("csv/job/Eval_Samples_eval_perplexity.csv"), "step,eval_perplexity");
  ASSERT_EQ(eval_rows.size(), 3u);
  ASSERT_EQ(ppl_rows.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const json& e = evals[i];
    EXPECT_EQ(e["step"], 2 * static_cast<int64_t>(i + 1));
    EXPECT_EQ(tb[i].step, 4 * e["step"].get<int64_t>());  // samples
    EXPECT_EQ(tb[i].scalars.at("Eval/Samples/eval_loss"), static_cast<float>(e["loss"].get<double>()));
    EXPECT_EQ(tb[i].scalars.at("Eval/Samples/eval_perplexity"), static_cast<float>(e["perplexity"].get<double>()));
    EXPECT_EQ(e["perplexity"].get<double>(), std::exp(e["loss"].get<double>()));
    EXPECT_EQ(eval_rows[i].first, tb[i].step);
    EXPECT_EQ(eval_rows[i].second, e["loss"].get<double>());
    EXPECT_EQ(ppl_rows[i].second, e["perplexity"].get<double>());
  }
}

// run.tensorboard_dir names the event files' directory itself; fp16 adds
// DeepSpeed's loss_scale.
TEST_F(RunMonitorTest, TensorboardDirOfTheRunSectionAndTheLossScale) {
  json j = small_job();
  j["run"]["tensorboard_dir"] = path("events");
  j["fp16"] = {{"enabled", true}, {"initial_scale_power", 8}};
  const testing::WorkerResult r = run(j);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<json> steps = of_kind(events(r.out), "step");
  const std::vector<Event> tb = scalar_events(path("events"));
  ASSERT_EQ(tb.size(), steps.size());
  for (size_t i = 0; i < tb.size(); ++i) {
    EXPECT_EQ(tb[i].scalars.at("Train/Samples/loss_scale"), static_cast<float>(steps[i]["loss_scale"].get<double>()));
  }
}

// A run resumed from its step-4 checkpoint after writing six steps (and a
// torn record, as a crash leaves) cuts both outputs back to step 4 and
// appends: every step once, the resumed run's figures for 5 and 6.
TEST_F(RunMonitorTest, AResumedRunAppendsWithoutDuplicateSteps) {
  json j = monitored();
  j["run"]["checkpoint"] = {{"dir", path("ckpt")}, {"interval", 4}, {"async", false}};
  ASSERT_EQ(run(j).code, kExitOk);
  const std::string events_file = event_files(path("tb/job")).at(0);
  const std::string torn = tfrecord("a record cut short").substr(0, 15);
  {
    std::ofstream(events_file, std::ios::app | std::ios::binary) << torn;
    std::ofstream(path("csv/job/Train_Samples_train_loss.csv"), std::ios::app) << "28,1.2";
  }
  j["run"]["resume"] = (fs::path(path("ckpt")) / "step-00000004").string();
  ASSERT_TRUE(fs::exists(j["run"]["resume"].get<std::string>()));
  const testing::WorkerResult r = run(j);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const std::vector<json> resumed = of_kind(events(r.out), "step");
  ASSERT_EQ(resumed.size(), 2u);
  ASSERT_EQ(event_files(path("tb/job")), std::vector<std::string>{events_file});
  const std::vector<Event> tb = scalar_events(path("tb/job"));
  ASSERT_EQ(tb.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(tb[i].step, 4 * static_cast<int64_t>(i + 1));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(tb[4 + i].scalars.at("Train/Samples/train_loss"), static_cast<float>(resumed[i]["loss"].get<double>()));
  }
  const auto rows = csv_rows(path("csv/job/Train_Samples_train_loss.csv"), "step,train_loss");
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(rows[i].first, 4 * static_cast<int64_t>(i + 1));
  EXPECT_EQ(rows[4].second, resumed[0]["loss"].get<double>());
  EXPECT_EQ(rows[5].second, resumed[1]["loss"].get<double>());
}

// A fresh run beside an earlier one's files starts a file of its own.
TEST_F(RunMonitorTest, AFreshRunStartsItsOwnEventFile) {
  json j = monitored();
  ASSERT_EQ(run(j).code, kExitOk);
  j["run"]["steps"] = 2;
  j["tensorboard"]["job_name"] = "job";
  ASSERT_EQ(run(j).code, kExitOk);
  const std::vector<std::string> files = event_files(path("tb/job"));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(records(files[0]).size(), 7u);
  EXPECT_EQ(records(files[1]).size(), 3u);
}

TEST_F(RunMonitorTest, OutputThatCannotBeCreatedAndMonitorsOverTheNetworkAreRefused) {
  write("file", "not a directory");
  for (const char* section : {"tensorboard", "csv_monitor"}) {
    json j = small_job();
    j[section] = {{"enabled", true}, {"output_path", path("file")}};
    const testing::WorkerResult r = run(j);
    EXPECT_EQ(r.code, kExitBadInput) << r.err;
    EXPECT_TRUE(absl::StrContains(
        r.err, std::string(section) + ": cannot create the directory '" + path("file") + "/DeepSpeedJobName'"))
        << r.err;
  }
  json j = small_job();
  j["run"]["tensorboard_dir"] = path("file");
  testing::WorkerResult r = run(j);
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_TRUE(absl::StrContains(r.err, "cannot create the directory")) << r.err;

  const std::vector<std::pair<json, std::string>> refused = {
      {{{"wandb", {{"enabled", true}, {"project", "p"}}}}, "wandb.enabled: true asks for Weights & Biases"},
      {{{"comet", {{"enabled", true}}}}, "comet.enabled: true asks for Comet"},
      {{{"tensorboard", {{"enabled", true}, {"log_dir", "x"}}}}, "unknown key 'tensorboard.log_dir'"},
      {{{"tensorboard", {{"enabled", true}, {"job_name", ""}}}}, "tensorboard.job_name: must not be empty"},
      {{{"tensorboard", {{"enabled", true}}}, {"run", {{"tensorboard_dir", "x"}}}}, "give one of them"},
      {{{"csv_monitor", {{"enabled", "yes"}}}}, "csv_monitor.enabled"},
  };
  for (const auto& [patch, message] : refused) {
    json bad = small_job();
    bad.merge_patch(patch);
    r = run(bad);
    EXPECT_EQ(r.code, kExitBadInput) << patch.dump();
    EXPECT_TRUE(absl::StrContains(r.err, message)) << patch.dump() << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists("DeepSpeedJobName"));
  EXPECT_FALSE(fs::exists("x"));
  // W&B and Comet switched off are accepted with their other keys.
  j = small_job();
  j["wandb"] = {{"enabled", false}, {"project", "p"}, {"team", "t"}};
  j["comet"] = {{"enabled", false}, {"project", "p"}};
  EXPECT_EQ(run(j).code, kExitOk);
}

// Files that stop taking writes (past RLIMIT_FSIZE here) end the monitors'
// output with a warning; the run trains to its end.
TEST_F(RunMonitorTest, AWriteThatFailsEndsTheOutputNotTheRun) {
  json j = monitored();
  j["run"]["steps"] = 12;
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 1500;  // the event file's first steps, not twelve
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const testing::WorkerResult r = run(j);
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, SIG_DFL);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(of_kind(events(r.out), "step").size(), 12u);
  EXPECT_TRUE(absl::StrContains(r.err, "warning: tensorboard: cannot write the event file")) << r.err;
  // What reached the file: some steps, then the record the limit cut.
  const TfRecords written = read_tfrecords(testing::read_file(event_files(path("tb/job")).at(0)));
  EXPECT_GT(written.records.size(), 1u);
  EXPECT_LT(written.records.size(), 13u);
}

}  // namespace
}  // namespace zerod
