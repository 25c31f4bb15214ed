// The worker gateway (worker_gateway.h): every worker call, fenced.
#include "coordinator/jobs/worker_gateway.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "coordinator/jobs/elastic_launched.h"
#include "coordinator/jobs/elastic_resize.h"
#include "coordinator/jobs/job_manager_internal.h"
#include "coordinator/jobs/job_paths.h"
#include "coordinator/jobs/worker_reports.h"
#include "coordinator/state/auth.h"
#include "proto/codec/attempt_ended.h"
#include "proto/codec/metrics_codec.h"
#include "proto/codec/resume_plan_codec.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

using internal::Fmt;
using internal::Resolve;

namespace {

// A record's ages (at the heartbeat's send) as times on this coordinator's
// clock: no clock is compared across hosts, only the call's latency lost.
// What a heartbeat may bring into the job's state, its events and the
// dashboard: the worker is trusted with its numbers, not with their range
// (a negative step, a NaN rate, a 1e300 s age that overflows the clock, a
// 5,000-character op name), so every field is bounded here first.
constexpr size_t kMaxHeartbeatWord = 64;    // state, a collective's op and group
constexpr size_t kMaxHeartbeatNote = 512;   // resumed_from, resumed_tier, resumed_note
constexpr int kMaxCollectiveRecords = 64;   // a flight recorder has a few groups
constexpr double kMaxAgeS = 86400.0 * 365;  // ages past a year are clamped (and never overflow ms)

// At most `max` bytes, cut on a UTF-8 boundary, control characters as '?'.
std::string Bounded(const std::string& s, size_t max) {
  std::string out = s.substr(0, max);
  if (s.size() > max) {
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();  // a cut lead byte
  }
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}
double NonNegative(double v) { return std::isfinite(v) && v > 0 ? v : 0; }
double Age(double v) { return std::isfinite(v) ? std::clamp(v, 0.0, kMaxAgeS) : 0; }

CollectiveSeen FromCollectiveRecord(const v1::CollectiveRecord& c, int64_t now) {
  CollectiveSeen s;
  s.group = Bounded(c.group(), kMaxHeartbeatWord);
  s.group_size = std::max(0, c.group_size());
  s.seq = std::max<int64_t>(0, c.seq());
  s.op = Bounded(c.op(), kMaxHeartbeatWord);
  s.unit = std::max(-1, c.unit());
  s.bytes = std::max<int64_t>(0, c.bytes());
  const double started = Age(c.started_ago_s());
  s.start_ms = now - static_cast<int64_t>(started * 1000);
  // Negative (or NaN): still in flight. It cannot have ended before it began.
  const bool in_flight = !(c.ended_ago_s() >= 0);
  s.end_ms = in_flight ? -1 : now - static_cast<int64_t>(std::min(Age(c.ended_ago_s()), started) * 1000);
  s.failed = c.failed();
  return s;
}

// A Join or Register from a worker built for another protocol version.
Status CheckProtocol(int version) {
  if (version == v1::PROTOCOL_VERSION_CURRENT) return shard::OkStatus();
  return shard::FailedPrecondition("worker protocol version " + std::to_string(version) +
                                   " does not match the coordinator's " +
                                   std::to_string(v1::PROTOCOL_VERSION_CURRENT) + "; use matching binaries");
}

}  // namespace

Status WorkerGateway::CheckWorker(const v1::WorkerId& id, const std::string& token) {
  auto lock = table_->Lock();
  return table_->CheckWorker(id, token).status();
}

StatusOr<v1::JoinResponse> WorkerGateway::Join(const v1::JoinRequest& req, const std::string& join_token) {
  RETURN_IF_ERROR(CheckProtocol(req.protocol_version()));
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->Find(req.job_id()));
  if (!IsExternal(*j))
    return shard::FailedPrecondition("job " + j->id + " has launcher '" + shard::LauncherName(j->config.resources.launcher) +
                                     "': its workers are started by the coordinator, not joined");
  if (join_token.empty() || !TokensEqual(join_token, j->join_token))
    return shard::Unauthenticated("join of job " + j->id + ": missing or wrong join token");
  if (!IsActive(*j)) return AttemptEnded("job " + j->id + " is over (" + JobStateName(j->state) + "); exit");
  const int world = j->config.parallel.world_size;
  if (req.world_size() > 0 && req.world_size() != world)
    return shard::InvalidArgument("job " + j->id + " has " + std::to_string(world) + " ranks but the worker's launcher " +
                                  "started " + std::to_string(req.world_size()) + " (SLURM_NTASKS); start exactly " +
                                  std::to_string(world));
  if (req.rank() < 0 || req.rank() >= world)
    return shard::InvalidArgument("rank " + std::to_string(req.rank()) + " out of range for job " + j->id + " (0.." +
                                  std::to_string(world - 1) + ")");
  if (j->state != v1::LAUNCHING && j->state != v1::RUNNING)
    return shard::Unavailable("job " + j->id + " is " + JobStateName(j->state) + "; join again shortly");
  // An attempt on fewer ranks (restart.min_world_size) hands out another
  // rank, or keeps the worker standing by to grow the job back.
  ASSIGN_OR_RETURN(const int rank, elastic::RankForJoin(*j, req.rank(), req.hostname(), opts_.now_ms()));
  JobRank& r = j->ranks[rank];
  if (r.registered && !r.exited)
    return shard::Unavailable("rank " + std::to_string(rank) + " of job " + j->id + " attempt " +
                              std::to_string(j->attempt) + " is taken by " + r.hostname +
                              "; join again when that attempt ends");
  // The first join starts the registration clock for everyone else.
  const bool first = std::none_of(j->ranks.begin(), j->ranks.end(), [](const JobRank& x) { return x.registered; });
  if (first)
    for (JobRank& x : j->ranks) x.launched_ms = opts_.now_ms();
  r.joined_ms = opts_.now_ms();
  if (!r.registered) r.hostname = req.hostname();  // its Register says it again
  v1::JoinResponse resp;
  resp.set_attempt(j->attempt);
  resp.set_token(ExternalWorkerToken(j->join_token, j->attempt));
  resp.set_rank(rank);
  return resp;
}

StatusOr<v1::RegisterResponse> WorkerGateway::Register(const v1::RegisterRequest& req, const std::string& token) {
  RETURN_IF_ERROR(CheckProtocol(req.protocol_version()));
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(req.id(), token));
  JobRank& r = j->ranks[req.id().rank()];
  const int64_t now = opts_.now_ms();
  r.registered = true;
  r.hostname = req.hostname();
  r.launcher_id = req.launcher_id();
  r.devices = req.devices();
  if (req.pid() > 0) r.pid = req.pid();
  r.state = "registered";
  r.last_heartbeat_ms = r.last_progress_ms = now;
  Status st = table_->store()->PutWorker({j->id, j->attempt, req.id().rank(), r.pid, r.hostname, r.state});
  if (!st.ok()) LOG_ERROR("job {}: {}", j->id, st.ToString());
  bool all = std::all_of(j->ranks.begin(), j->ranks.end(), [](const JobRank& x) { return x.registered; });
  if (all && j->state == v1::LAUNCHING)
    table_->SetState(*j, v1::RUNNING, "running", "all " + std::to_string(j->ranks.size()) + " worker(s) registered");
  v1::RegisterResponse resp;
  resp.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  *resp.mutable_spec() = j->spec;
  resp.set_world_size(static_cast<int>(j->ranks.size()));
  resp.set_kv_prefix(AttemptKvPrefix(req.id()));
  resp.set_heartbeat_interval_s(opts_.heartbeat_interval_s);
  const bool per_host = MemoryTierPerHost(*j);
  *resp.mutable_resume_plan() = ToResumePlanProto(j->ckpt.Plan(
      MemoryTierDirOf(*j), per_host, per_host ? EndedPerHostMemoryDirs(*j) : std::vector<std::string>{}));
  return resp;
}

std::vector<std::string> WorkerGateway::EndedPerHostMemoryDirs(const Job& j) const {
  // The newest 16 by when they ended: a host that ran none of them finds
  // nothing to remove; one that ran older ones keeps them until it reboots.
  constexpr size_t kMax = 16;
  const std::string root = fs::path(MemoryTierDirOf(j)).parent_path().string();
  std::vector<std::pair<int64_t, std::string>> ended;
  for (const auto& [id, other] : table_->jobs()) {
    if (IsActive(*other) || !MemoryTierPerHost(*other)) continue;
    const std::string dir = MemoryTierDirOf(*other);
    if (fs::path(dir).parent_path().string() == root && dir != MemoryTierDirOf(j))
      ended.emplace_back(other->updated_ms, dir);
  }
  std::sort(ended.begin(), ended.end(), std::greater<>());
  if (ended.size() > kMax) ended.resize(kMax);
  std::vector<std::string> out;
  for (auto& e : ended) out.push_back(std::move(e.second));
  return out;
}

void WorkerGateway::RecordMetrics(Job& j, const google::protobuf::RepeatedPtrField<v1::StepMetric>& metrics,
                                     int64_t now) {
  // The gateway (worker_reports.h): a row out of range is refused — not
  // stored, not counted — and said once per attempt as an event.
  const StepReportLimits limits = StepReportLimitsFor(j.config);
  std::vector<const v1::StepMetric*> accepted;
  for (const v1::StepMetric& m : metrics) {
    if (Status bad = CheckStepMetric(m, limits); !bad.ok()) {
      LOG_WARN("job {} attempt {}: refused rank 0's metrics of {}", j.id, j.attempt, bad.message());
      if (j.refused_report_attempt != j.attempt) {
        j.refused_report_attempt = j.attempt;
        table_->Emit(j, "report_refused",
                   "rank 0 reported " + bad.message() + "; the row is not recorded (further ones: the coordinator log)");
      }
      continue;
    }
    accepted.push_back(&m);
  }
  if (accepted.empty()) return;
  std::vector<shard::StepMetrics> rows;
  for (const v1::StepMetric* m : accepted) {
    rows.push_back(FromStepMetric(*m, j.attempt));
    j.step_seconds.push_back(m->seconds());
    if (j.step_seconds.size() > 20) j.step_seconds.pop_front();
    j.step_hist.Observe(m->seconds());
    j.progress.set_tokens_total(AddToCounter(j.progress.tokens_total(), m->tokens()));
  }
  Status st = table_->store()->PutMetrics(j.id, rows);
  if (!st.ok()) LOG_ERROR("job {}: {}", j.id, st.ToString());
  const v1::StepMetric& last = *accepted.back();
  j.progress.set_step(last.step());
  j.progress.set_loss(last.loss());
  double sum = 0;
  for (double s : j.step_seconds) sum += s;
  const double mean = sum / j.step_seconds.size();
  j.progress.set_tokens_per_s(last.seconds() > 0 ? last.tokens() / last.seconds() : 0);
  j.progress.set_lr(last.lr());
  j.progress.set_grad_norm(last.grad_norm());
  j.progress.set_loss_scale(last.loss_scale());
  PutProgressFigures(last, &j.progress);  // pairs and the optional figures (step_metric_fields.h)
  for (const v1::StepMetric* m : accepted) {
    if (m->eval_samples() <= 0) continue;
    j.progress.set_eval_step(m->step());
    j.progress.set_eval_loss(m->eval_loss());
    j.progress.set_eval_exact_match(m->eval_exact_match());
  }
  j.progress.set_step_seconds(last.seconds());
  // Older workers send no positions: MFU stays unknown rather than wrong.
  j.progress.set_mfu(j.mfu_per_position_s > 0 && last.seconds() > 0 && last.positions() > 0
                         ? last.positions() / last.seconds() * j.mfu_per_position_s
                         : -1);
  j.progress.set_eta_s(mean * std::max<int64_t>(0, j.config.train.steps - last.step()));
  j.updated_ms = now;
  v1::JobEvent ev;  // live only: progress is kept as metrics, not as events
  ev.set_unix_ms(now);
  ev.set_job_id(j.id);
  ev.set_attempt(j.attempt);
  ev.set_kind("progress");
  ev.set_state(j.state);
  *ev.mutable_progress() = j.progress;
  table_->Publish(ev);
}

void WorkerGateway::NoteComputeTimes(Job& j, int rank,
                                     const google::protobuf::RepeatedPtrField<v1::StepMetric>& metrics) {
  if (j.health.stragglers_attempt != j.attempt) {
    j.health.stragglers.Reset(static_cast<int>(j.ranks.size()),
                       {j.config.health.straggler_ratio, j.config.health.straggler_window});
    j.health.stragglers_attempt = j.attempt;
  }
  for (const v1::StepMetric& m : metrics)
    if (m.compute_seconds() > 0 && m.step() <= j.config.train.steps)  // 0: a worker too old to say
      j.health.stragglers.Observe(rank, m.step(), m.compute_seconds());
  const std::vector<StragglerChange> changes = j.health.stragglers.Evaluate();
  for (const StragglerChange& c : changes) {
    j.ranks[c.rank].straggler = c.straggler;
    table_->Emit(j, c.straggler ? "straggler" : "straggler_cleared", StragglerDetector::Describe(c));
  }
  // The control loop restarts the attempt (Fail needs the launcher's
  // Terminate, which runs off this lock); a spent budget is said here, once.
  const StragglerDecision d =
      DecideStragglerAction(changes, j.config.health.straggler_action == shard::StragglerAction::kRestart,
                            j.restarts, j.config.restart.max_restarts);
  if (d.restart && j.health.straggler_restart.empty()) j.health.straggler_restart = d.message;
  if (!d.restart && !d.message.empty()) table_->Emit(j, "straggler_action", d.message);
  for (size_t r = 0; r < j.ranks.size(); ++r)
    j.ranks[r].compute_seconds = std::max(0.0, j.health.stragglers.compute_seconds(static_cast<int>(r)));
}

StatusOr<v1::HeartbeatResponse> WorkerGateway::Heartbeat(const v1::HeartbeatRequest& req, const std::string& token) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(req.id(), token));
  ASSIGN_OR_RETURN(const shard::CheckpointTier resumed_tier,
                   FromCheckpointTierProto(req.resumed_checkpoint_tier(),
                                           "heartbeat of rank " + std::to_string(req.id().rank())));
  const int64_t now = opts_.now_ms();
  table_->NoteAlive(now);
  JobRank& r = j->ranks[req.id().rank()];
  r.last_heartbeat_ms = now;
  const int64_t step = std::max<int64_t>(0, req.step());
  if (step != r.step) r.last_progress_ms = now;
  r.step = step;
  r.tokens_per_s = NonNegative(req.tokens_per_s());
  r.rss_bytes = std::max<int64_t>(0, req.rss_bytes());
  r.step_seconds = NonNegative(req.step_seconds());
  r.collectives.clear();
  for (const v1::CollectiveRecord& c : req.collectives()) {
    if (static_cast<int>(r.collectives.size()) == kMaxCollectiveRecords) break;
    r.collectives.push_back(FromCollectiveRecord(c, now));
  }
  if (!r.done) r.state = Bounded(req.state(), kMaxHeartbeatWord);
  if (j->adopted && j->state == v1::RUNNING) {
    j->adopted = false;
    table_->Emit(*j, "adopted", "rank " + std::to_string(req.id().rank()) + " heartbeats after the coordinator restart");
  }
  if (req.id().rank() == 0 && req.resume_events_size() > 0 && j->ckpt.TakeResumeEvents(j->attempt)) {
    // The workers' resume fallbacks (a per-host memory step no host set
    // could assemble, a damaged step): each said, before what was resumed.
    constexpr int kMaxLines = 32;  // a worker's fallbacks are bounded by the steps kept; so is what is stored
    for (int i = 0; i < std::min(req.resume_events_size(), kMaxLines); ++i) {
      const std::string& line = req.resume_events(i);
      table_->Emit(*j, line.rfind("starting from step 0", 0) == 0 ? "resume_from_scratch" : "resume_skipped",
                   line.substr(0, 1000));
    }
  }
  if (req.id().rank() == 0 && !req.resumed_from().empty() && j->ckpt.TakeResumedEvent(j->attempt)) {
    // Once per attempt: which checkpoint the workers actually loaded (for
    // checkpoint.resume: auto only they know), printed by run and watch.
    const int64_t total = j->config.train.steps;
    const int64_t from = std::max<int64_t>(0, req.resumed_step());
    const std::string tier = std::string(shard::CheckpointTierName(resumed_tier)) +
                             (req.resumed_note().empty() ? "" : ", " + Bounded(req.resumed_note(), kMaxHeartbeatNote));
    table_->Emit(*j, "resumed",
               "resumed from step " + std::to_string(from) + " (" + tier + "): " +
                   Bounded(req.resumed_from(), kMaxHeartbeatNote) + " at step " + std::to_string(from) +
                   (from >= total
                        ? " >= train.steps " + std::to_string(total) + ": already complete, nothing to train"
                        : " of " + std::to_string(total)));
  }
  // The job's metric rows are rank 0's; every rank's steps carry its compute time.
  if (req.id().rank() == 0) RecordMetrics(*j, req.metrics(), now);
  NoteComputeTimes(*j, req.id().rank(), req.metrics());
  return v1::HeartbeatResponse();
}

StatusOr<v1::ReportCheckpointResponse> WorkerGateway::ReportCheckpoint(const v1::ReportCheckpointRequest& req,
                                                                    const std::string& token) {
  RetentionTask retain;
  StatusOr<v1::ReportCheckpointResponse> resp = [&] {
    auto lock = table_->Lock();
    return ReportCheckpointLocked(req, token, &retain);
  }();
  if (retain.due) {
    // A memory step's retention deletes only inside the opened, checked job folder.
    const bool memory = retain.tier == shard::CheckpointTier::kMemory && !retain.memory_dir.empty();
    if (Status st = memory ? shard::ApplyMemoryRetention(retain.memory_dir, retain.keep_last, retain.run_fingerprint)
                           : CheckpointCommitter::Retain(retain.step_dir, retain.keep_last, retain.run_fingerprint);
        !st.ok())
      LOG_ERROR("checkpoint retention in {}: {}", fs::path(retain.step_dir).parent_path().string(), st.ToString());
    // A committed disk step makes the memory steps older than it worthless.
    if (!retain.memory_dir.empty() && retain.tier == shard::CheckpointTier::kDisk)
      if (Status st = shard::DropMemoryStepsBefore(retain.memory_dir, retain.step, retain.run_fingerprint); !st.ok())
        LOG_ERROR("{}", st.ToString());
  }
  return resp;
}

Status WorkerGateway::CheckStepDir(const Job& job, const ShardReport& rep, const std::string& memory_dir,
                                   int64_t step) const {
  const Job* j = &job;
  // The step must be inside this job's checkpoint directory (of its tier).
  const std::string expected = rep.tier == shard::CheckpointTier::kMemory ? memory_dir : CheckpointDirOf(*j);
  if (fs::path(rep.step_dir).lexically_normal().parent_path() != fs::path(expected).lexically_normal())
    return shard::InvalidArgument("checkpoint report names " + rep.step_dir + ", outside the job's " + expected);
  // ... where it leads now: a symlink made since submission must not take the
  // commit (or the shards) outside the allowed roots. The memory tier's
  // default root is the coordinator's own rule (MemoryCheckpointJobDir), not
  // a path of the job file's; a memory.dir the job names is confined (the
  // link checks below hold for both).
  const bool confined = rep.tier == shard::CheckpointTier::kDisk || !j->config.checkpoint.memory.dir.empty();
  if (!opts_.allowed_roots.empty() && confined &&
      std::none_of(opts_.allowed_roots.begin(), opts_.allowed_roots.end(),
                   [&](const std::string& root) { return IsInside(rep.step_dir, root); }))
    return shard::PermissionDenied("checkpoint report names " + rep.step_dir +
                                   ", which resolves outside the coordinator's allowed roots (a symlink in " +
                                   expected + "?); not committed");
  // ... and is a folder of its own: COMMITTED written through a link would
  // land in (and commit) whatever step the link leads to.
  std::error_code lec;
  if (fs::is_symlink(fs::symlink_status(rep.step_dir, lec)))
    return shard::FailedPrecondition("checkpoint report names " + rep.step_dir +
                                     ", a symbolic link; a checkpoint is never committed through a link");
  if (fs::path(rep.step_dir).filename() != shard::StepDirName(step))
    return shard::InvalidArgument("checkpoint report of step " + std::to_string(step) + " names " +
                                  rep.step_dir + ", not a " + shard::StepDirName(step) + " directory");
  return shard::OkStatus();
}

Status WorkerGateway::CheckPerHostStepDir(const Job& j, const std::string& step_dir, int64_t step, int rank) const {
  // <memory root>/host-<name>/step_N: a host's folder of this job's tier.
  const fs::path p = fs::path(step_dir).lexically_normal();
  const std::string root = MemoryTierDirOf(j);
  if (p.parent_path().parent_path() != fs::path(root).lexically_normal() ||
      p.parent_path().filename().string().rfind("host-", 0) != 0)
    return shard::InvalidArgument("memory checkpoint report of rank " + std::to_string(rank) + " names " + step_dir +
                                  ", outside the job's host folders " + root + "/host-*");
  if (p.filename() != shard::StepDirName(step))
    return shard::InvalidArgument("checkpoint report of step " + std::to_string(step) + " names " + step_dir +
                                  ", not a " + shard::StepDirName(step) + " directory");
  return shard::OkStatus();
}

StatusOr<v1::ReportCheckpointResponse> WorkerGateway::MemoryStepSkipped(Job& j, const v1::ReportCheckpointRequest& req,
                                                                        shard::CheckpointTier tier) {
  if (tier != shard::CheckpointTier::kMemory)
    return shard::InvalidArgument("checkpoint report of rank " + std::to_string(req.id().rank()) +
                                  ": only a memory step may be skipped, not a " + shard::CheckpointTierName(tier) +
                                  " step");
  // One event per step, however many ranks skip it; the step stays pending
  // and is dropped when a newer memory step commits.
  if (j.ckpt.NoteMemorySkipped(req.step())) {
    constexpr size_t kMaxReason = 300;  // a worker's text, bounded before it is stored
    std::string why = req.memory_skipped().substr(0, kMaxReason);
    if (req.memory_skipped().size() > kMaxReason) why += "…";
    table_->Emit(j, "memory_step_skipped",
                 "step " + std::to_string(req.step()) + ": " + why + " (rank " + std::to_string(req.id().rank()) +
                     "); training and disk checkpoints go on");
  }
  return v1::ReportCheckpointResponse();
}

StatusOr<v1::ReportCheckpointResponse> WorkerGateway::ReportCheckpointLocked(const v1::ReportCheckpointRequest& req,
                                                                          const std::string& token,
                                                                          RetentionTask* retain) {
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(req.id(), token));
  // A rank that reports a checkpoint is alive, whatever its heartbeat thread's
  // backoff (after a coordinator restart the report can come first).
  j->ranks[req.id().rank()].last_heartbeat_ms = opts_.now_ms();
  ShardReport rep;
  rep.rank = req.id().rank();
  rep.step = req.step();
  rep.step_dir = Resolve(j->spec.workdir(), req.step_dir());
  rep.manifest_base = req.manifest_base();
  ASSIGN_OR_RETURN(rep.tier, FromCheckpointTierProto(req.checkpoint_tier(),
                                                     "checkpoint report of rank " + std::to_string(req.id().rank())));
  const std::string memory_dir = MemoryTierDirOf(*j);
  if (rep.tier == shard::CheckpointTier::kMemory && memory_dir.empty())
    return shard::FailedPrecondition("memory checkpoint report of rank " + std::to_string(req.id().rank()) +
                                     ", but this job has no memory tier; not committed");
  if (!req.memory_skipped().empty()) return MemoryStepSkipped(*j, req, rep.tier);
  // A per-host memory tier: commit from the reports, never touch the folder
  // (it is on the rank's host: MemoryTierPerHost).
  rep.remote = rep.tier == shard::CheckpointTier::kMemory && MemoryTierPerHost(*j);
  if (!rep.remote) {
    RETURN_IF_ERROR(CheckStepDir(*j, rep, memory_dir, req.step()));
  } else {
    RETURN_IF_ERROR(CheckPerHostStepDir(*j, rep.step_dir, req.step(), req.id().rank()));
    // Across hosts every shard needs its partner copy (replicas: 1); the
    // hosts are the ones the ranks registered with.
    const std::string& first = j->ranks[0].hostname;
    rep.partner_required = j->config.checkpoint.memory.replicas > 0 &&
                           std::any_of(j->ranks.begin(), j->ranks.end(),
                                       [&](const JobRank& x) { return x.hostname != first; });
    for (const v1::CheckpointFile& f : req.files()) rep.partner_ranks.push_back(f.partner_copy() ? f.partner_rank() : -1);
  }
  for (const v1::CheckpointFile& f : req.files()) rep.files.push_back({f.name(), f.shard_rank(), f.size(), f.xxh64()});
  if (req.id().rank() == 0) {
    RecordMetrics(*j, req.metrics(), opts_.now_ms());  // before the commit: they belong to steps it covers
    NoteComputeTimes(*j, 0, req.metrics());
  }
  auto added = j->ckpt.Add(rep, opts_.now_ms());
  if (!added.ok() && rep.remote && added.status().code() == shard::StatusCode::kFailedPrecondition) {
    // A partner copy that did not land costs this memory step, not the run.
    table_->Emit(*j, "memory_step_not_committed", added.status().message());
    return v1::ReportCheckpointResponse();
  }
  ASSIGN_OR_RETURN(std::optional<shard::Manifest> done, std::move(added));
  LOG_DEBUG("job {} attempt {}: rank {} reported checkpoint step {} ({}); {}", j->id, j->attempt, req.id().rank(),
            req.step(), rep.step_dir, done ? "every rank has: commit written" : "commit waits for the other ranks");
  v1::ReportCheckpointResponse resp;
  if (done) {
    resp.set_committed(true);
    const bool memory = rep.tier == shard::CheckpointTier::kMemory;
    // A per-host memory step: its folders are the workers' (they keep their
    // host's steps); the ledger holds it for the next attempt (control_loop.cc).
    if (!rep.remote)
      *retain = RetentionTask{true, rep.step_dir, done->run_fingerprint,
                              memory ? j->config.checkpoint.memory.keep_last : j->ckpt.keep_last(), rep.tier,
                              done->step, MemoryTierPerHost(*j) ? std::string() : memory_dir};
    j->ckpt.Committed(rep, *done, opts_.now_ms());
    j->progress.set_last_committed_step(done->step);
    int64_t bytes = 0;
    for (const auto& f : done->files) bytes += static_cast<int64_t>(f.size);
    Status st = table_->store()->PutCheckpoint({j->id, done->step, done->world, static_cast<int>(done->files.size()), bytes,
                                       rep.step_dir, opts_.now_ms(), shard::CheckpointTierName(rep.tier)});
    if (!st.ok()) {
      // COMMITTED is on disk but the store does not know it: the job fails
      // (the next Tick, or ReportDone), and this rank hears why.
      table_->NoteStoreFailure(*j, "the commit of step " + std::to_string(done->step), st);
      return shard::Internal("job " + j->id + ": " + j->store_failure);
    }
    table_->Emit(*j, "checkpoint_committed",
               "step " + std::to_string(done->step) + ": " + std::to_string(done->files.size()) + " shard(s), " +
                   Fmt(bytes / 1e6, "%.1f") + " MB in " + rep.step_dir +
                   (rep.tier == shard::CheckpointTier::kMemory ? " (memory tier)" : ""));
    // A shrunk job grows back from this step: workers standing by
    // (external) or places free again (a launcher).
    if (!elastic::MaybeGrow(*j, done->step, opts_.now_ms(), attempts_))
      elastic::MaybeGrowLaunched(*j, done->step, opts_.now_ms(), attempts_);
  }
  return resp;
}

Status WorkerGateway::ReportDone(const v1::ReportDoneRequest& req, const std::string& token) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(req.id(), token));
  // A trained attempt ends exactly at train.steps; only one that resumed at or
  // past the end (nothing_trained) may name a later step.
  const int64_t total = j->config.train.steps;
  if (req.step() < 0 || (req.step() > total && !req.nothing_trained()))
    return shard::InvalidArgument("rank " + std::to_string(req.id().rank()) + " of job " + j->id +
                                  " reported done at step " + std::to_string(req.step()) + ", outside 0.." +
                                  std::to_string(total) + " (train.steps); not recorded");
  JobRank& r = j->ranks[req.id().rank()];
  r.done = true;
  r.state = "done";
  r.step = req.step();
  if (req.id().rank() == 0) {
    j->progress.set_step(req.step());
    j->progress.set_loss(req.final_loss());
    j->progress.set_eta_s(0);
    j->nothing_trained = req.nothing_trained();
  }
  bool all = std::all_of(j->ranks.begin(), j->ranks.end(), [](const JobRank& x) { return x.done; });
  if (all) {
    // The processes exit by themselves; anything left after the grace is killed.
    j->draining_attempt = j->attempt;
    j->kill_at_ms = opts_.now_ms() + static_cast<int64_t>(opts_.kill_grace_s * 1000);
    rendezvous_->Drop(AttemptKvPrefix(req.id()));
    if (!j->store_failure.empty()) {  // trained, but its record is not stored: not a success
      attempts_->Fail(*j, j->store_failure, /*retryable=*/false);
      return shard::OkStatus();
    }
    // Resumed at or past the end: a distinct outcome, never "final loss 0".
    const std::string what =
        j->nothing_trained
            ? "already complete: the resumed checkpoint is at step " + std::to_string(j->progress.step()) +
                  " >= train.steps " + std::to_string(j->config.train.steps) +
                  "; nothing was trained (raise train.steps to continue, or set checkpoint.resume: none or a new "
                  "name to start over)"
            : std::to_string(j->progress.step()) + " steps, final loss " + Fmt(j->progress.loss()) +
                  // The truth, never an earlier finite figure.
                  (std::isfinite(j->progress.loss()) ? "" : " (not finite: see shardctl metrics for the last steps)");
    table_->SetState(*j, v1::SUCCEEDED, "succeeded",
                   what + (j->restarts > 0 ? ", after " + std::to_string(j->restarts) + " restart(s)" : ""));
  }
  return shard::OkStatus();
}

Status WorkerGateway::ReportFailure(const v1::ReportFailureRequest& req, const std::string& token) {
  {
    auto lock = table_->Lock();
    RETURN_IF_ERROR(ReportFailureLocked(req, token));
  }
  runner_->TryRunTerminates();  // the attempt may have ended: stop its other ranks
  return shard::OkStatus();
}

Status WorkerGateway::ReportFailureLocked(const v1::ReportFailureRequest& req, const std::string& token) {
  ASSIGN_OR_RETURN(Job * j, table_->CheckWorker(req.id(), token));
  JobRank& rank = j->ranks[req.id().rank()];
  if (req.preempted()) {
    rank.preempted = true;
    rank.state = "preempted";
    LOG_INFO("job {} attempt {}: rank {} stopped on its launcher's signal: {}", j->id, j->attempt, req.id().rank(),
             req.error());
    const bool all = std::all_of(j->ranks.begin(), j->ranks.end(), [](const JobRank& x) { return x.preempted || x.done; });
    if (all)
      attempts_->Preempt(*j, "every rank stopped on its launcher's signal after checkpointing step " +
                                   std::to_string(req.step()));
    return shard::OkStatus();
  }
  rank.state = "failed";
  rank.error = req.error();
  const std::string why = "rank " + std::to_string(req.id().rank()) + " failed: " + req.error();
  if (!req.retryable()) {
    attempts_->Fail(*j, why, false);
    return shard::OkStatus();
  }
  // A peer's death shows up on the survivors first: give the launcher a
  // moment (the next Ticks poll it) to report the exit that caused it, so the
  // event names the cause.
  if ((j->state == v1::LAUNCHING || j->state == v1::RUNNING) && j->health.pending_failure.empty()) {
    j->health.pending_failure = why;
    j->health.pending_deadline_ms = opts_.now_ms() + 1000;
  }
  return shard::OkStatus();
}

}  // namespace shardd
