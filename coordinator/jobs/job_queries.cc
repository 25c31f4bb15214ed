// The read side: job status and lists, committed checkpoints, per-step
// metrics, rank logs, event watches (past events from the store, then live
// ones), and the telemetry behind /metrics and the dashboard.
#include "coordinator/jobs/job_queries.h"

#include "proto/codec/resume_plan_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "proto/codec/metrics_codec.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/step_listing.h"
#include "shard/common/file_util.h"

namespace fs = std::filesystem;

namespace shardd {
namespace {

// rel itself, or rel's folder + "pod_<i>.log" when rel is a symlink to
// exactly that name (what a Kubernetes pod writes for each of its ranks).
std::string PodLogTarget(const std::string& root, const std::string& rel) {
  std::error_code ec;
  const fs::path link = fs::path(root) / rel;
  if (!fs::is_symlink(link, ec)) return rel;
  const std::string target = fs::read_symlink(link, ec).string();
  const bool pod_log = !ec && target.rfind("pod_", 0) == 0 && target.size() > 8 &&
                       target.compare(target.size() - 4, 4, ".log") == 0 &&
                       std::all_of(target.begin() + 4, target.end() - 4, [](char c) { return c >= '0' && c <= '9'; });
  return pod_log ? (fs::path(rel).parent_path() / target).string() : rel;
}

}  // namespace

StatusOr<v1::JobStatus> JobQueries::Get(const std::string& job_id) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->Find(job_id));
  return table_->StatusOf(*j);
}

std::vector<v1::JobStatus> JobQueries::List(bool include_finished) {
  auto lock = table_->Lock();
  std::vector<v1::JobStatus> out;
  for (const auto& [id, j] : table_->jobs())
    if (include_finished || IsActive(*j)) out.push_back(table_->StatusOf(*j));
  std::sort(out.begin(), out.end(),
            [](const v1::JobStatus& a, const v1::JobStatus& b) { return a.created_unix_ms() < b.created_unix_ms(); });
  return out;
}

StatusOr<std::vector<v1::CheckpointInfo>> JobQueries::Checkpoints(const std::string& job_id) {
  std::string disk_dir, memory_dir;
  std::vector<v1::CheckpointInfo> out;
  {
    auto lock = table_->Lock();
    ASSIGN_OR_RETURN(Job * j, table_->Find(job_id));
    disk_dir = CheckpointDirOf(*j);
    memory_dir = MemoryTierDirOf(*j);
    // A per-host tier's folders are on the ranks' hosts: its newest commit,
    // as committed from the reports (with rank 0's host's path).
    if (MemoryTierPerHost(*j)) {
      memory_dir.clear();
      auto m = j->ckpt.memory_manifest().empty() ? StatusOr<shard::Manifest>(shard::NotFound(""))
                                          : shard::Manifest::FromJson(j->ckpt.memory_manifest(), "memory commit");
      if (m.ok()) {
        v1::CheckpointInfo c;
        c.set_step(m->step);
        c.set_world(m->world);
        c.set_files(static_cast<int>(m->files.size()));
        int64_t bytes = 0;
        for (const auto& f : m->files) bytes += static_cast<int64_t>(f.size);
        c.set_bytes(bytes);
        c.set_path(j->ckpt.memory_step_dir());
        c.set_checkpoint_tier(v1::CHECKPOINT_TIER_MEMORY);
        out.push_back(c);
      }
    }
  }
  // Both tiers (checkpoint.memory), in step order.
  for (const auto& [dir, tier] : {std::pair{disk_dir, shard::CheckpointTier::kDisk},
                                  std::pair{memory_dir, shard::CheckpointTier::kMemory}}) {
    if (dir.empty() || !fs::exists(dir)) continue;
    ASSIGN_OR_RETURN(std::vector<shard::StepInfo> steps, shard::ListSteps(dir));
    for (const shard::StepInfo& s : steps) {
      if (!s.committed) continue;
      // The same proof resume uses and the model config export reads (without
      // re-reading checksums: a listing must stay cheap); a step that fails is
      // listed with its problem, under its manifest's step.
      const shard::StepListing l = shard::DescribeStep(s, /*verify_checksums=*/false);
      v1::CheckpointInfo c;
      c.set_step(l.step);
      if (!l.valid) c.set_problem(l.problem);
      c.set_world(l.world);
      c.set_files(l.files);
      c.set_bytes(l.manifest_bytes);
      c.set_path(s.dir);
      c.set_checkpoint_tier(ToCheckpointTierProto(tier));
      struct stat st;
      if (::stat((s.dir + "/" + shard::kCommittedFile).c_str(), &st) == 0)
        c.set_committed_unix_ms(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000);
      out.push_back(c);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const v1::CheckpointInfo& a, const v1::CheckpointInfo& b) { return a.step() < b.step(); });
  return out;
}

StatusOr<v1::GetMetricsResponse> JobQueries::Metrics(const std::string& job_id, int64_t after_step, int64_t last,
                                                     int64_t max_bytes) {
  {
    auto lock = table_->Lock();
    RETURN_IF_ERROR(table_->Find(job_id).status());
  }
  // Read without the job lock, so heartbeats keep flowing; one row past the cap says
  // whether there are more. The first row always goes, so paging advances.
  ASSIGN_OR_RETURN(std::vector<shard::StepMetrics> rows,
                   table_->store()->LoadMetrics(job_id, {.after_step = after_step, .last = last, .max_rows = kMaxMetricRows + 1}));
  if (max_bytes <= 0) max_bytes = 4 << 20;
  v1::GetMetricsResponse resp;
  int64_t bytes = 2;  // the truncated flag
  for (const shard::StepMetrics& m : rows) {
    v1::MetricRow r = ToMetricRow(m);
    const size_t n = r.ByteSizeLong();
    bytes += 1 + google::protobuf::io::CodedOutputStream::VarintSize64(n) + n;  // tag, length, row
    if (resp.rows_size() == kMaxMetricRows || (bytes > max_bytes && resp.rows_size() > 0)) {
      resp.set_truncated(true);
      break;
    }
    *resp.add_rows() = std::move(r);
  }
  return resp;
}

StatusOr<LogChunk> JobQueries::Logs(const std::string& job_id, int rank, int attempt, int64_t offset, int max_bytes) {
  std::string rel;
  LogChunk chunk;
  {
    auto lock = table_->Lock();
    ASSIGN_OR_RETURN(Job * j, table_->Find(job_id));
    if (j->attempt == 0) return shard::FailedPrecondition("job " + job_id + " has not launched yet");
    chunk.attempt = attempt > 0 ? attempt : j->attempt;
    if (chunk.attempt > j->attempt)
      return shard::OutOfRange("job " + job_id + " has no attempt " + std::to_string(attempt));
    if (rank < 0 || rank >= j->config.parallel.world_size)
      return shard::OutOfRange("job " + job_id + " has ranks 0.." + std::to_string(j->config.parallel.world_size - 1));
    chunk.finished = chunk.attempt < j->attempt || (!IsActive(*j) && j->draining_attempt == 0) ||
                     j->state == v1::RESTARTING;
    rel = "jobs/" + j->id + "/attempt_" + std::to_string(chunk.attempt) + "/rank_" + std::to_string(rank) + ".log";
  }
  if (max_bytes <= 0 || max_bytes > (4 << 20)) max_bytes = 64 << 10;
  // The job's processes can write in its folders: never follow a symlink they
  // may have put there (rank_1.log -> /etc/shadow), nor block on a FIFO. The
  // one link allowed is a Kubernetes pod's rank_<r>.log -> pod_<i>.log beside it.
  rel = PodLogTarget(opts_.state_dir, rel);
  auto fd = shard::OpenBeneath(opts_.state_dir, rel, O_RDONLY | O_NONBLOCK);
  if (!fd.ok()) {
    if (fd.status().code() != shard::StatusCode::kNotFound) return fd.status();
    chunk.next_offset = 0;  // not written yet
    return chunk;
  }
  struct stat st;
  if (::fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(*fd);
    return shard::PermissionDenied(opts_.state_dir + "/" + rel + " is not a regular file; not served");
  }
  const int64_t size = st.st_size;
  if (offset < 0) offset = std::max<int64_t>(0, size - max_bytes);
  offset = std::min(offset, size);
  const int64_t n = std::min<int64_t>(max_bytes, size - offset);
  chunk.data.resize(n);
  const ssize_t got = n > 0 ? ::pread(*fd, chunk.data.data(), n, offset) : 0;
  ::close(*fd);
  chunk.data.resize(got > 0 ? got : 0);
  chunk.next_offset = offset + static_cast<int64_t>(chunk.data.size());
  return chunk;
}

namespace {

std::vector<v1::JobEvent> ToEvents(const std::vector<EventRecord>& events) {
  std::vector<v1::JobEvent> out;
  for (const EventRecord& e : events) {
    v1::JobEvent ev;
    ev.set_seq(e.seq);
    ev.set_unix_ms(e.unix_ms);
    ev.set_job_id(e.job_id);
    ev.set_attempt(e.attempt);
    ev.set_kind(e.kind);
    ev.set_message(e.message);
    ev.set_state(static_cast<v1::JobState>(e.state));
    out.push_back(std::move(ev));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<v1::JobEvent>> JobQueries::Events(const std::string& job_id, int64_t after_seq) {
  auto lock = table_->Lock();
  RETURN_IF_ERROR(table_->Find(job_id).status());
  ASSIGN_OR_RETURN(std::vector<EventRecord> events, table_->store()->LoadEvents(job_id, after_seq));
  return ToEvents(events);
}

StatusOr<int64_t> JobQueries::Watch(const std::string& job_id, int64_t after_seq, EventSink sink,
                                    std::vector<v1::JobEvent>* past) {
  auto lock = table_->Lock();
  ASSIGN_OR_RETURN(Job * j, table_->Find(job_id));
  ASSIGN_OR_RETURN(std::vector<EventRecord> events, table_->store()->LoadEvents(job_id, after_seq));
  for (v1::JobEvent& ev : ToEvents(events)) past->push_back(std::move(ev));
  if (!past->empty()) *past->back().mutable_progress() = j->progress;
  return table_->AddWatcher(job_id, std::move(sink));
}

std::vector<JobTelemetry> JobQueries::Telemetry(int64_t finished_grace_ms) {
  auto lock = table_->Lock();
  const int64_t now = opts_.now_ms();
  std::vector<JobTelemetry> out;
  for (const auto& [id, j] : table_->jobs()) {
    if (!IsActive(*j) && finished_grace_ms >= 0 && now - j->updated_ms > finished_grace_ms) continue;
    JobTelemetry t;
    t.status = table_->StatusOf(*j);
    t.step_seconds = j->step_hist;
    t.checkpoint_commit_seconds = j->ckpt.commit_seconds();
    t.checkpoints_committed = j->ckpt.committed();
    out.push_back(std::move(t));
  }
  return out;
}

bool JobQueries::Drained(const std::string& job_id) {
  auto lock = table_->Lock();
  auto it = table_->jobs().find(job_id);
  return it == table_->jobs().end() || (!IsActive(*it->second) && it->second->draining_attempt == 0);
}

void JobQueries::Unwatch(int64_t watch_id) {
  auto lock = table_->Lock();
  table_->RemoveWatcher(watch_id);
}

}  // namespace shardd
