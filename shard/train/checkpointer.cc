#include "shard/train/checkpointer.h"

#include <chrono>
#include <filesystem>

#include "shard/ckpt/committer.h"
#include "shard/ckpt/shard_file.h"
#include "shard/common/logging.h"
#include "shard/common/owned_dir.h"

namespace shard {
namespace fs = std::filesystem;

Checkpointer::Checkpointer(const JobConfig& job, const CheckpointRole& role, OptimizerState* state,
                           FsdpRuntime* runtime, const ParamLayout& layout)
    : job_(job), role_(role), state_(state), runtime_(runtime), layout_(layout) {}

Checkpointer::~Checkpointer() { (void)Wait(); }

std::string Checkpointer::job_dir() const { return CheckpointJobDir(job_); }

std::string Checkpointer::tier_dir(CheckpointTier tier) const {
  return tier == CheckpointTier::kMemory ? role_.memory_dir : job_dir();
}

Status Checkpointer::Wait() {
  if (thread_.joinable()) thread_.join();
  Status st = async_status_;
  async_status_ = OkStatus();
  return st;
}

Status Checkpointer::Save(const Manifest& base, CheckpointTier tier) {
  auto t0 = std::chrono::steady_clock::now();
  if (tier == CheckpointTier::kMemory && role_.memory_dir.empty())
    return FailedPrecondition("a memory-tier checkpoint was asked for but this job has no memory tier folder");
  RETURN_IF_ERROR(Wait().WithContext("the previous checkpoint save failed"));
  // Counted when it returns, whichever way it does.
  struct Stall {
    Checkpointer* c;
    CheckpointTier tier;
    std::chrono::steady_clock::time_point t0;
    ~Stall() {
      if (tier != CheckpointTier::kMemory) return;
      ++c->memory_saves_;
      c->memory_stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } stall{this, tier, t0};
  if (!role_.writer && !role_.committer) return OkStatus();
  if (!state_->device()->holds_data()) return SimulateSnapshot();
  const int sr = runtime_->shard_rank();
  const int units = runtime_->num_units();
  std::vector<ShardUnitData> data(role_.writer ? units : 0);
  // Synchronous and offloaded: the host master, m and v stay as they are
  // until Save returns, so they are written in place — no 12 B/param copy.
  const bool in_place = !job_.checkpoint.async && state_->offloaded();
  const size_t elem = DTypeSize(state_->state_dtype());
  if (role_.writer && in_place) {
    for (int u = 0; u < units; ++u) data[u] = {state_->held(u, 0), state_->held(u, 1), state_->held(u, 2)};
  } else if (role_.writer) {
    // Snapshot: params, m, v of the real (unpadded) part of each owned shard,
    // into buffers kept from the previous save (allocating ~12 bytes/param on
    // every save was most of the async stall). Safe to reuse: Wait() above
    // guarantees no writer thread still reads them.
    snapshot_.resize(3 * static_cast<size_t>(units));
    for (int u = 0; u < units; ++u) {
      const int64_t n = runtime_->layout(u).real_in(sr);
      for (int k = 0; k < 3; ++k) snapshot_[3 * u + k].resize(static_cast<size_t>(n) * elem);
      state_->ReadShardHeld(u, n, snapshot_[3 * u].data(), snapshot_[3 * u + 1].data(), snapshot_[3 * u + 2].data());
      data[u] = {snapshot_[3 * u].data(), snapshot_[3 * u + 1].data(), snapshot_[3 * u + 2].data()};
    }
  }
  if (job_.checkpoint.async) {
    thread_ = std::thread([this, base, data, tier] { async_status_ = WriteAndCommit(base, data, tier); });
    stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return OkStatus();
  }
  Status st = WriteAndCommit(base, data, tier);
  // A synchronous save keeps nothing: between saves the host holds no snapshot.
  std::vector<std::vector<uint8_t>>().swap(snapshot_);
  stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

Status Checkpointer::SimulateSnapshot() {
  // The memory simulator: the snapshot's bytes as Save holds them (none when
  // it writes in place; freed after a synchronous write, kept by an async
  // one), from the backend so they are counted; nothing is copied, written
  // or committed.
  if (!role_.writer || (!job_.checkpoint.async && state_->offloaded())) return OkStatus();
  const int sr = runtime_->shard_rank();
  if (sim_snapshot_.empty()) {
    for (int u = 0; u < runtime_->num_units(); ++u) {
      for (int k = 0; k < 3; ++k) {
        const int64_t n = runtime_->layout(u).real_in(sr);
        const int64_t floats = state_->state_dtype() == DType::kF32 ? n : (n + 1) / 2;
        ASSIGN_OR_RETURN(HostBuffer b, HostBuffer::Create(state_->device(), floats));
        sim_snapshot_.push_back(std::move(b));
      }
    }
  }
  if (!job_.checkpoint.async) sim_snapshot_.clear();
  return OkStatus();
}

StatusOr<std::string> Checkpointer::MakeStepDir(int64_t step, CheckpointTier tier) const {
  if (tier == CheckpointTier::kMemory) {
    // The root and every folder down to the step's: the user's own, never a
    // link, writable by nobody else, created 0700 (owned_dir.h).
    ASSIGN_OR_RETURN(OwnedDir dir, OpenMemoryTierDir(role_.memory_dir, role_.memory_depth, /*create=*/true));
    ASSIGN_OR_RETURN(OwnedDir step_dir, dir.Sub(StepDirName(step), /*create=*/true));
    return step_dir.path();
  }
  const std::string step_dir = (fs::path(job_dir()) / StepDirName(step)).string();
  std::error_code ec;
  // Never through a link: a step folder linked to another run's step would
  // have that run's shard files and COMMITTED overwritten by this one's.
  if (fs::is_symlink(fs::symlink_status(step_dir, ec)))
    return FailedPrecondition("checkpoint directory " + step_dir + " is a symbolic link (to " +
                              fs::read_symlink(step_dir, ec).string() +
                              "); shardd never writes a checkpoint through a link: remove it (rm " + step_dir + ")");
  fs::create_directories(step_dir, ec);
  if (ec) return DataLoss("cannot create checkpoint directory " + step_dir + ": " + ec.message());
  return step_dir;
}

Status Checkpointer::WriteShard(const Manifest& base, const std::vector<ShardUnitData>& host,
                                const std::string& step_dir, CheckpointTier tier, bool* reported) {
  const int sr = runtime_->shard_rank();
  ShardHeader h;
  h.step = base.step;
  h.world = base.world;
  h.rank = role_.rank;
  h.shard_rank = sr;
  h.shard_count = base.shard_count;
  h.model_hash = base.model_hash;
  std::vector<ShardUnitData> data;
  for (int u = 0; u < runtime_->num_units(); ++u) {
    const ShardLayout& sl = runtime_->layout(u);
    ShardUnit su;
    su.name = layout_.units[u].name;
    su.numel = sl.numel;
    su.begin = std::min(sl.begin(sr), sl.numel);
    su.count = sl.real_in(sr);
    su.dtype = state_->state_dtype();  // the state as held
    h.units.push_back(su);
    data.push_back(host[u]);
  }
  // A crashed earlier attempt at this step may have left this shard's report:
  // drop it first, so the committer does not take it for this attempt's.
  std::error_code ec;
  fs::remove(fs::path(step_dir) / (ShardFileName(sr, base.shard_count) + ".report"), ec);
  ASSIGN_OR_RETURN(WrittenFile wf, WriteShardFile(step_dir, h, data));
  RETURN_IF_ERROR(WriteShardReport(step_dir, wf, sr));
  if (!role_.report) return OkStatus();
  *reported = true;
  ManifestFile mf;
  mf.name = wf.name;
  mf.shard_rank = sr;
  mf.size = wf.size;
  mf.xxh64 = wf.xxh64;
  return role_.report(base, step_dir, {mf}, tier)
      .WithContext(std::string("reporting ") + CheckpointTierName(tier) + " checkpoint step " +
                   std::to_string(base.step));
}

void Checkpointer::SkipMemoryStep(int64_t step, const Status& why) {
  ++memory_skips_;
  LOG_WARN("memory_step_skipped: step {}: {}; training and disk checkpoints go on", step, why.message());
  if (role_.memory_skipped) role_.memory_skipped(step, why.message());
}

Status Checkpointer::WriteAndCommit(const Manifest& base, const std::vector<ShardUnitData>& host,
                                    CheckpointTier tier) {
  // A memory step that cannot be written or committed here (a full tmpfs, a
  // folder that is a file or refused) costs that memory step only; a failed
  // report is the coordinator's answer and stays an error.
  const bool memory = tier == CheckpointTier::kMemory;
  auto step_dir = MakeStepDir(base.step, tier);
  if (!step_dir.ok() && memory) {
    SkipMemoryStep(base.step, step_dir.status());
    return OkStatus();
  }
  RETURN_IF_ERROR(step_dir.status());
  if (role_.writer) {
    bool reported = false;
    Status st = WriteShard(base, host, *step_dir, tier, &reported);
    if (!st.ok() && memory && !reported) {
      SkipMemoryStep(base.step, st);
      return OkStatus();
    }
    RETURN_IF_ERROR(st);
  }
  if (role_.committer) {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(job_.parallel.comm_timeout_s * 1000));
    Status st = CommitStep(*step_dir, base, timeout);
    if (!st.ok() && memory) {
      SkipMemoryStep(base.step, st);
      return OkStatus();
    }
    RETURN_IF_ERROR(st);
    LOG_INFO("checkpoint step {} ({}) committed in {}", base.step, CheckpointTierName(tier), *step_dir);
    st = Retain(base, tier);
    // The memory step is committed; its retention failing costs tmpfs, not the run.
    if (!st.ok() && memory) {
      LOG_WARN("memory tier retention after step {}: {}", base.step, st.ToString());
      return OkStatus();
    }
    RETURN_IF_ERROR(st);
  }
  return OkStatus();
}

Status Checkpointer::Retain(const Manifest& base, CheckpointTier tier) {
  if (tier == CheckpointTier::kMemory)
    return ApplyMemoryRetention(role_.memory_dir, job_.checkpoint.memory.keep_last, base.run_fingerprint);
  RETURN_IF_ERROR(ApplyRetention(job_dir(), job_.checkpoint.keep_last, base.run_fingerprint));
  // A committed disk step makes every older memory step worthless. A memory
  // folder that cannot be pruned (refused, not a folder) costs tmpfs, never
  // the disk step.
  if (!role_.memory_dir.empty())
    if (Status st = DropMemoryStepsBefore(role_.memory_dir, base.step, base.run_fingerprint); !st.ok())
      LOG_WARN("after disk step {}: {}", base.step, st.ToString());
  return OkStatus();
}

}  // namespace shard
