// Trainer checkpoints: the manifest, save, and resume at any world size and
// ZeRO stage (trainer.h). Layout of a checkpoint directory:
//   manifest.json           written last by rank 0
//   rank-00000.safetensors  each rank's share (ZeroEngine::save_shard); under
//                           stage 0 rank 0's alone, which every rank holds
#include <filesystem>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/engine/trainer.h"

namespace zerod {
namespace {

// Whether any rank failed (a collective); `self` is this rank's failure.
absl::StatusOr<bool> any_failed(Communicator& comm, bool self) {
  double f = self ? 1 : 0;
  ZEROD_RETURN_IF_ERROR(all_reduce(comm, &f, 1, CommType::kF64, ReduceOp::kMax));
  return f > 0;
}

}  // namespace

absl::StatusOr<std::string> Trainer::save_checkpoint(const std::string& root, int keep) {
  const int rank = comm_->rank(), world = comm_->world_size();
  const std::string dir = absl::StrCat(root, "/", checkpoint_dir_name(steps_), ".tmp");
  absl::Status s;
  if (rank == 0) s = begin_checkpoint(root, steps_).status();
  ZEROD_ASSIGN_OR_RETURN(bool failed, any_failed(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("checkpoint directory not created on rank 0") : s;

  // Each rank's file: {ok, crc, bytes}; under stage 0 only rank 0 writes.
  std::vector<int64_t> mine = {1, 0, 0}, all(3 * world);
  if (zero_->stage() > 0 || rank == 0) {
    const std::string file = absl::StrCat(dir, "/", shard_file_name(rank));
    // The CRC comes from the writer; the size is a stat, not a second read.
    // A failure still joins the all-gather below, so no rank is left waiting.
    absl::StatusOr<uint32_t> crc = zero_->save_shard(file);
    std::error_code ec;
    const uintmax_t bytes = crc.ok() ? std::filesystem::file_size(file, ec) : 0;
    if (crc.ok() && !ec) {
      mine = {1, *crc, static_cast<int64_t>(bytes)};
    } else {
      s = crc.ok() ? absl::InternalError(absl::StrCat("cannot stat ", file, ": ", ec.message())) : crc.status();
      mine[0] = 0;
    }
  }
  ZEROD_RETURN_IF_ERROR(comm_->all_gather(mine.data(), all.data(), 3, CommType::kI64)->wait());
  for (int r = 0; r < world; ++r) {
    if (all[3 * r] == 0) return s.ok() ? absl::AbortedError(absl::StrCat("checkpoint: rank ", r, " failed")) : s;
  }

  if (rank == 0) {
    nlohmann::json m = manifest_shape(layout(), cfg_, world, zero_->stage());
    const LossScaler::State ls = scaler_.state();
    const DataLoader::State dl = loader_->state();
    m["step"] = steps_;
    m["updates"] = updates_;
    m["last_lr"] = last_lr_;
    m["loss_scaler"] = {{"scale", ls.scale}, {"hysteresis", ls.hysteresis}, {"iter", ls.iter},
                        {"last_overflow_iter", ls.last_overflow_iter}};
    m["data_loader"] = {{"epoch", dl.epoch}, {"position", dl.position}};
    m["rng"] = {{"sample", sample_rng_state_}};
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < (zero_->stage() > 0 ? world : 1); ++r) {
      files.push_back({{"rank", r},
                       {"name", shard_file_name(r)},
                       {"crc32c", static_cast<uint32_t>(all[3 * r + 1])},
                       {"bytes", all[3 * r + 2]}});
    }
    m["files"] = files;
    const std::string text = m.dump(2);
    s = write_file_durably(dir + "/manifest.json", text.data(), text.size()).status();
    if (s.ok()) s = commit_checkpoint(root, steps_, keep);
  }
  ZEROD_ASSIGN_OR_RETURN(failed, any_failed(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("checkpoint not committed on rank 0") : s;
  return absl::StrCat(root, "/", checkpoint_dir_name(steps_));
}

absl::Status Trainer::resume(const std::string& checkpoint) {
  const int rank = comm_->rank(), world = comm_->world_size();
  std::vector<ManifestFile> files;  // the saved partition's shard files
  LossScaler::State scaler{};
  DataLoader::State loader;
  int64_t steps = 0, updates = 0;
  double last_lr = 0;
  uint64_t sample = 0;
  // Everything is checked first (every rank its share of the files'
  // checksums), then the state changes on every rank or on none.
  absl::Status s = [&]() -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(CheckpointManifest c, read_manifest(checkpoint));
    const nlohmann::json& m = c.json;
    // The world size and stage may differ; the rest must not. Each mismatch is named.
    const nlohmann::json want = manifest_shape(layout(), cfg_, world, zero_->stage());
    for (const char* key : {"model", "precision", "tensors", "optimizer"}) {
      if (!m.contains(key) || m[key] != want[key]) {
        return absl::InvalidArgumentError(
            absl::StrCat(c.path, ": '", key, "' is ", m.contains(key) ? m[key].dump() : "missing",
                         " but this run has ", want[key].dump(),
                         " (resuming needs the same model, precision and optimizer)"));
      }
    }
    for (size_t r = rank; r < c.files.size(); r += world) ZEROD_RETURN_IF_ERROR(verify_file(c.files[r]));
    try {
      const nlohmann::json& ls = m.at("loss_scaler");
      scaler = {ls.at("scale").get<double>(), ls.at("hysteresis").get<int>(), ls.at("iter").get<int64_t>(),
                ls.at("last_overflow_iter").get<int64_t>()};
      loader = {m.at("data_loader").at("epoch").get<uint64_t>(), m.at("data_loader").at("position").get<uint64_t>()};
      steps = m.at("step").get<int64_t>();
      updates = m.at("updates").get<int64_t>();
      last_lr = m.at("last_lr").get<double>();
      sample = m.at("rng").at("sample").get<uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(c.path, ": missing or mistyped field: ", e.what()));
    }
    files = std::move(c.files);
    return absl::OkStatus();
  }();
  ZEROD_ASSIGN_OR_RETURN(bool failed, any_failed(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("resume failed on another rank") : s;

  // The same partition (world size, or stage 0 on both sides) reads this
  // rank's file whole; any other takes its ranges from the saved ones.
  const size_t parts = zero_->stage() > 0 ? static_cast<size_t>(world) : 1;
  if (files.size() == parts) {
    s = zero_->load_shard(files[parts > 1 ? rank : 0].path);
  } else {
    SavedShards saved(layout(), cfg_.optimizer, file_paths(files));
    s = zero_->load_resharded(saved);
  }
  if (s.ok()) {
    scaler_.set_state(scaler);
    loader_->set_state(loader);
    steps_ = steps;
    updates_ = updates;
    last_lr_ = last_lr;
    sample_rng_state_ = sample;
  }
  ZEROD_ASSIGN_OR_RETURN(failed, any_failed(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("resume failed on another rank") : s;
  return zero_->publish_params();
}

}  // namespace zerod
