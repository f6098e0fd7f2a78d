// Trainer checkpoints: the manifest, saves (in the foreground, or staged
// and written by a thread, then published at a step boundary), and resume
// at any world size and ZeRO stage (trainer.h). Layout of a checkpoint
// directory:
//   manifest.json           written last by rank 0
//   rank-00000.safetensors  each rank's share (ZeroEngine::save_shard); under
//                           stage 0 rank 0's alone, which every rank holds
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <future>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/core/exit_codes.h"
#include "runtime/engine/manifest.h"
#include "runtime/engine/trainer.h"

namespace zerod {
namespace {

// Whether `self` holds on any rank (a collective).
absl::StatusOr<bool> any_rank(Communicator& comm, bool self) {
  double f = self ? 1 : 0;
  ZEROD_RETURN_IF_ERROR(all_reduce(comm, &f, 1, CommType::kF64, ReduceOp::kMax));
  return f > 0;
}

// A collective: whether any rank failed, agreed so that every rank exits
// with one status. A rank that did not fail itself fails with the worst
// kind another did (bad input over a run failure, exit_codes.h).
absl::Status agree(Communicator& comm, const absl::Status& own, const char* what) {
  double code = own.ok() ? kExitOk : exit_code_for(own);
  ZEROD_RETURN_IF_ERROR(all_reduce(comm, &code, 1, CommType::kF64, ReduceOp::kMax));
  if (code == kExitOk || !own.ok()) return own;
  const std::string message = absl::StrCat(what, " failed on another rank");
  return code == kExitBadInput ? absl::FailedPreconditionError(message) : absl::AbortedError(message);
}

// data.sources as a checkpoint records them: [{"path", "weight"}, ...].
nlohmann::json sources_json(const DataConfig& data) {
  nlohmann::json out = nlohmann::json::array();
  for (const DataSource& s : data.sources) out.push_back({{"path", s.path}, {"weight", s.weight}});
  return out;
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

nlohmann::json Trainer::manifest_state() const {
  nlohmann::json m = manifest_shape(layout(), cfg_, comm_->world_size(), cfg_.zero.stage);
  const LossScaler::State ls = scaler_.state();
  const DataLoader::State dl = loader_->state();
  m["step"] = steps_;
  m["updates"] = updates_;
  m["last_lr"] = last_lr_;
  m["loss_scaler"] = {{"scale", ls.scale}, {"hysteresis", ls.hysteresis}, {"iter", ls.iter},
                      {"last_overflow_iter", ls.last_overflow_iter}};
  m["data_loader"] = {{"epoch", dl.epoch}, {"position", dl.position}};
  if (!dl.taken.empty()) {  // data.sources: what each gave, and what they were
    m["data_loader"]["taken"] = dl.taken;
    m["data_loader"]["sources"] = sources_json(cfg_.data);
  }
  // The windows the walk leaves out: a resume must leave out the same.
  if (const double held = DataLoader::held_out_share(cfg_.data); held > 0) m["data_loader"]["held_out"] = held;
  m["rng"] = {{"sample", sample_rng_state_}};
  if (cfg_.data.eval) {
    const EvalRecord& e = eval_record_;
    m["eval"] = {{"evaluations", e.evaluations},
                 {"best_loss", e.best_loss},
                 {"best_step", e.best_step},
                 {"since_best", e.since_best}};
  }
  return m;
}

absl::StatusOr<uint64_t> Trainer::stage_shard() {
  ZEROD_ASSIGN_OR_RETURN(SafetensorsLayout file, zero_->shard_file());
  if (staging_.bytes() != file.bytes()) {
    staging_.reset();
    absl::StatusOr<Buffer> b = device_->allocate(file.bytes(), Category::kWorkspace, Tier::kHost);
    if (absl::IsResourceExhausted(b.status())) return 0;
    ZEROD_RETURN_IF_ERROR(b.status());
    staging_ = std::move(*b);
  }
  char* at = staging_.host<char>();
  ZEROD_RETURN_IF_ERROR(zero_->serialize_shard(file, [&](const void* data, size_t n) {
    std::memcpy(at, data, n);
    at += n;
    return absl::OkStatus();
  }));
  return file.bytes();
}

absl::StatusOr<std::string> Trainer::save_checkpoint(const std::string& root, int keep) {
  ZEROD_RETURN_IF_ERROR(start_checkpoint(root, keep, /*background=*/false));
  ZEROD_ASSIGN_OR_RETURN(std::optional<SavedCheckpoint> saved, finish_checkpoint(/*wait=*/true));
  return saved.value().path;
}

absl::Status Trainer::start_checkpoint(const std::string& root, int keep, bool background) {
  if (pending_) return absl::FailedPreconditionError("a checkpoint save is still in progress");
  const int rank = comm_->rank();
  PendingSave p;
  p.start = std::chrono::steady_clock::now();
  p.step = steps_;
  p.root = root;
  p.keep = keep;
  absl::Status s;
  if (rank == 0) s = begin_checkpoint(root, steps_).status();
  ZEROD_ASSIGN_OR_RETURN(bool failed, any_rank(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("checkpoint directory not created on rank 0") : s;
  if (rank == 0) p.manifest = manifest_state();

  // A failure here is kept for finish_checkpoint, which every rank reaches,
  // so no rank is left waiting in a collective.
  if (rank < zero_->shard_count()) {
    const std::string file = absl::StrCat(root, "/", checkpoint_dir_name(steps_), ".tmp/", shard_file_name(rank));
    absl::StatusOr<uint64_t> staged = uint64_t{0};
    if (background && zero_->shard_in_memory()) staged = stage_shard();
    if (staged.ok() && *staged > 0) {
      p.staged_bytes = *staged;
      p.write = std::async(std::launch::async, [file, data = staging_.data(), n = *staged,
                                                faults = env_.io_faults]() -> absl::StatusOr<uint32_t> {
        // The writer yields to training: where training keeps every core
        // busy (CPU training) it fills the gaps instead of stretching each
        // step (bench/RESULTS.md); where cores are idle it runs at once.
        setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
        return write_file_durably(file, data, n, &faults);
      });
    } else {
      // The CRC comes from the writer; the size is a stat, not a second read.
      absl::StatusOr<uint32_t> crc = staged.ok() ? zero_->save_shard(file) : staged.status();
      std::error_code ec;
      const uintmax_t bytes = crc.ok() ? std::filesystem::file_size(file, ec) : 0;
      if (crc.ok() && !ec) {
        p.result = {1, *crc, static_cast<int64_t>(bytes)};
      } else {
        p.status = crc.ok() ? absl::InternalError(absl::StrCat("cannot stat ", file, ": ", ec.message())) : crc.status();
        p.result[0] = 0;
      }
    }
  }
  p.blocked = std::chrono::steady_clock::now() - p.start;
  pending_ = std::move(p);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SavedCheckpoint>> Trainer::finish_checkpoint(bool wait) {
  if (!pending_) return absl::FailedPreconditionError("no checkpoint save is in progress");
  const auto entered = std::chrono::steady_clock::now();
  const int rank = comm_->rank(), world = comm_->world_size();
  std::future<absl::StatusOr<uint32_t>>& write = pending_->write;
  if (write.valid() && wait) write.wait();
  const bool writing = write.valid() && write.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  ZEROD_ASSIGN_OR_RETURN(bool any_writing, any_rank(*comm_, writing));
  if (any_writing) {
    pending_->blocked += std::chrono::steady_clock::now() - entered;
    return std::nullopt;
  }

  PendingSave p = std::move(*pending_);
  pending_.reset();
  if (p.write.valid()) {
    absl::StatusOr<uint32_t> crc = p.write.get();
    p.result = {crc.ok() ? 1 : 0, crc.ok() ? *crc : 0, static_cast<int64_t>(p.staged_bytes)};
    if (!crc.ok()) p.status = crc.status();
  }
  // Each rank's file: {ok, crc, bytes}; under stage 0 only rank 0's.
  std::vector<int64_t> all(3 * world);
  ZEROD_RETURN_IF_ERROR(comm_->all_gather(p.result.data(), all.data(), 3, CommType::kI64)->wait());
  absl::Status s = p.status;
  for (int r = 0; r < world; ++r) {
    if (all[3 * r] == 0) return s.ok() ? absl::AbortedError(absl::StrCat("checkpoint: rank ", r, " failed")) : s;
  }

  if (rank == 0) {
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < zero_->shard_count(); ++r) {
      files.push_back({{"rank", r},
                       {"name", shard_file_name(r)},
                       {"crc32c", static_cast<uint32_t>(all[3 * r + 1])},
                       {"bytes", all[3 * r + 2]}});
    }
    p.manifest["files"] = files;
    seal_manifest(p.manifest);
    const std::string text = p.manifest.dump(2);
    const std::string dir = absl::StrCat(p.root, "/", checkpoint_dir_name(p.step), ".tmp");
    // The removal a commit left running ends before the next commit.
    if (prune_.valid()) s = prune_.get();
    if (s.ok()) s = write_file_durably(dir + "/manifest.json", text.data(), text.size(), &env_.io_faults).status();
    if (s.ok()) s = commit_checkpoint(p.root, p.step);
    // Removing a checkpoint's files can take longer than the copy (unlinking
    // gigabytes), so a save published at a step boundary leaves it to a
    // thread.
    if (s.ok() && wait) s = prune_checkpoints(p.root, p.keep);
    if (s.ok() && !wait) {
      prune_ = std::async(std::launch::async, [root = p.root, keep = p.keep] { return prune_checkpoints(root, keep); });
    }
  }
  ZEROD_ASSIGN_OR_RETURN(bool failed, any_rank(*comm_, !s.ok()));
  if (failed) return s.ok() ? absl::AbortedError("checkpoint not committed on rank 0") : s;
  const auto now = std::chrono::steady_clock::now();
  return SavedCheckpoint{p.step, absl::StrCat(p.root, "/", checkpoint_dir_name(p.step)), seconds(now - p.start),
                         seconds(p.blocked + (now - entered))};
}

absl::Status Trainer::finish_pruning() { return prune_.valid() ? prune_.get() : absl::OkStatus(); }

Trainer::ResumeFrom Trainer::resume_from(const JobConfig& cfg, int world_size, const std::string& checkpoint) {
  if (checkpoint.empty()) return ResumeFrom::kNothing;
  const absl::StatusOr<CheckpointManifest> c = read_manifest(checkpoint);
  if (!c.ok()) return ResumeFrom::kNothing;
  const GptLayout layout(cfg.model);
  const ZeroShape shape(layout, cfg.zero.stage, world_size, 0, cfg.precision);
  return static_cast<int>(c->files.size()) == shape.part.world_size() ? ResumeFrom::kSamePartition
                                                                       : ResumeFrom::kOtherPartition;
}

absl::Status Trainer::resume(const std::string& checkpoint) {
  const int rank = comm_->rank(), world = comm_->world_size();
  std::vector<ManifestFile> files;  // the saved partition's shard files
  LossScaler::State scaler{};
  DataLoader::State loader;
  int64_t steps = 0, updates = 0;
  double last_lr = 0;
  uint64_t sample = 0;
  EvalRecord eval;  // none in a checkpoint of a run without data.eval
  // Everything is checked first (every rank its share of the files'
  // checksums), then the state changes on every rank or on none.
  absl::Status s = [&]() -> absl::Status {
    ZEROD_ASSIGN_OR_RETURN(CheckpointManifest c, read_manifest(checkpoint));
    const nlohmann::json& m = c.json;
    // The world size and stage may differ; the rest must not. Each mismatch is named.
    const nlohmann::json want = manifest_shape(layout(), cfg_, world, cfg_.zero.stage);
    for (const char* key : {"model", "lora", "precision", "tensors", "optimizer"}) {
      const nlohmann::json have = m.value(key, nlohmann::json()), need = want.value(key, nlohmann::json());
      if (have != need) {
        return absl::InvalidArgumentError(
            absl::StrCat(c.path, ": '", key, "' is ", m.contains(key) ? have.dump() : "missing", " but this run has ",
                         want.contains(key) ? need.dump() : "none",
                         " (resuming needs the same model, adapters, precision and optimizer)"));
      }
    }
    for (size_t r = rank; r < c.files.size(); r += world) ZEROD_RETURN_IF_ERROR(verify_file(c.files[r]));
    // Each field of the state in its range, before any of it is set.
    constexpr int64_t kMost = int64_t{1} << 53;
    ZEROD_ASSIGN_OR_RETURN(steps, manifest_integer(c, "step", 0, kMost));
    ZEROD_ASSIGN_OR_RETURN(updates, manifest_integer(c, "updates", 0, steps));
    ZEROD_ASSIGN_OR_RETURN(last_lr, manifest_real(c, "last_lr", /*positive=*/false));
    ZEROD_ASSIGN_OR_RETURN(scaler.scale, manifest_real(c, "loss_scaler.scale", /*positive=*/true));
    ZEROD_ASSIGN_OR_RETURN(const int64_t hysteresis, manifest_integer(c, "loss_scaler.hysteresis", 0, INT32_MAX));
    scaler.hysteresis = static_cast<int>(hysteresis);
    ZEROD_ASSIGN_OR_RETURN(scaler.iter, manifest_integer(c, "loss_scaler.iter", 0, kMost));
    ZEROD_ASSIGN_OR_RETURN(scaler.last_overflow_iter,
                           manifest_integer(c, "loss_scaler.last_overflow_iter", -1, scaler.iter));
    ZEROD_ASSIGN_OR_RETURN(loader.epoch, manifest_unsigned(c, "data_loader.epoch"));
    ZEROD_ASSIGN_OR_RETURN(loader.position, manifest_unsigned(c, "data_loader.position"));
    // data.sources: the same sources and weights, and the windows each gave.
    const nlohmann::json saved = m["data_loader"].value("sources", nlohmann::json::array());
    if (saved != sources_json(cfg_.data)) {
      return absl::InvalidArgumentError(absl::StrCat(c.path, ": saved with data.sources ", saved.dump(),
                                                     ", this run has ", sources_json(cfg_.data).dump(),
                                                     " (the walk over them would not continue)"));
    }
    const nlohmann::json taken = m["data_loader"].value("taken", nlohmann::json::array());
    if (!taken.is_array() || taken.size() != cfg_.data.sources.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.path, ": 'data_loader.taken' is ", taken.dump(), ", not a count of windows a source"));
    }
    for (const nlohmann::json& n : taken) {
      if (!n.is_number_unsigned())
        return absl::InvalidArgumentError(
            absl::StrCat(c.path, ": 'data_loader.taken' is ", taken.dump(), ", not a count of windows a source"));
      loader.taken.push_back(n.get<uint64_t>());
    }
    double held = 0;
    if (m["data_loader"].contains("held_out")) {
      ZEROD_ASSIGN_OR_RETURN(held, manifest_real(c, "data_loader.held_out", /*positive=*/true));
    }
    if (const double share = DataLoader::held_out_share(cfg_.data); held != share) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.path, ": saved with data.eval.fraction ", held, ", this run has ", share,
                       " (it would train on windows the other held out, or the reverse)"));
    }
    ZEROD_ASSIGN_OR_RETURN(sample, manifest_unsigned(c, "rng.sample"));
    if (cfg_.data.eval && m.contains("eval")) {
      ZEROD_ASSIGN_OR_RETURN(eval.evaluations, manifest_integer(c, "eval.evaluations", 0, kMost));
      ZEROD_ASSIGN_OR_RETURN(eval.best_loss, manifest_real(c, "eval.best_loss", /*positive=*/false));
      ZEROD_ASSIGN_OR_RETURN(eval.best_step, manifest_integer(c, "eval.best_step", 0, steps));
      ZEROD_ASSIGN_OR_RETURN(const int64_t since, manifest_integer(c, "eval.since_best", 0, eval.evaluations));
      eval.since_best = static_cast<int>(since);
    }
    files = std::move(c.files);
    return absl::OkStatus();
  }();
  ZEROD_RETURN_IF_ERROR(agree(*comm_, s, "resume"));

  // The same partition (world size, or stage 0 on both sides) reads this
  // rank's file whole; any other takes its ranges from the saved ones.
  const size_t parts = static_cast<size_t>(zero_->shard_count());
  if (files.size() == parts) {
    s = zero_->load_shard(files[parts > 1 ? rank : 0].path);
  } else {
    SavedShards saved(layout(), cfg_.optimizer, file_paths(files), &env_.io_faults);
    s = zero_->load_resharded(saved);
  }
  if (s.ok()) {
    scaler_.set_state(scaler);
    loader_->set_state(loader);
    steps_ = steps;
    updates_ = updates;
    last_lr_ = last_lr;
    sample_rng_state_ = sample;
    eval_record_ = eval;
  }
  ZEROD_RETURN_IF_ERROR(agree(*comm_, s, "resume"));
  return zero_->publish_params();
}

}  // namespace zerod
