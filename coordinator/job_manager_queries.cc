// JobManager's read side: committed checkpoints, per-step metrics, rank logs,
// event watches (past events from the store, then live ones), and the
// telemetry behind /metrics and the dashboard.
#include "coordinator/job_manager.h"

#include <google/protobuf/io/coded_stream.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "shard/ckpt/catalog.h"
#include "shard/common/file_util.h"

namespace fs = std::filesystem;

namespace shardd {

StatusOr<std::vector<v1::CheckpointInfo>> JobManager::Checkpoints(const std::string& job_id) {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(Job * j, FindLocked(job_id));
    dir = CheckpointJobDir(*j);
  }
  std::vector<v1::CheckpointInfo> out;
  if (!fs::exists(dir)) return out;
  ASSIGN_OR_RETURN(std::vector<shard::StepInfo> steps, shard::ListSteps(dir));
  for (const shard::StepInfo& s : steps) {
    if (!s.committed) continue;
    v1::CheckpointInfo c;
    c.set_step(s.step);
    // The same proof resume uses (without re-reading checksums: a listing
    // must stay cheap); a step that fails it is listed with its problem.
    auto reader = shard::CheckpointReader::Open(s.dir, /*verify_checksums=*/false);
    if (!reader.ok()) c.set_problem(reader.status().message());
    // The manifest's own figures, even for a step that fails the proof.
    auto text = shard::ReadFileToString(s.dir + "/" + shard::kCommittedFile);
    auto m = text.ok() ? shard::Manifest::FromJson(*text, s.dir) : shard::StatusOr<shard::Manifest>(text.status());
    if (m.ok()) {
      c.set_world(m->world);
      c.set_files(static_cast<int>(m->files.size()));
      int64_t bytes = 0;
      for (const auto& f : m->files) bytes += static_cast<int64_t>(f.size);
      c.set_bytes(bytes);
    }
    c.set_path(s.dir);
    struct stat st;
    if (::stat((s.dir + "/" + shard::kCommittedFile).c_str(), &st) == 0)
      c.set_committed_unix_ms(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000);
    out.push_back(c);
  }
  return out;
}

StatusOr<v1::GetMetricsResponse> JobManager::Metrics(const std::string& job_id, int64_t after_step, int64_t last,
                                                     int64_t max_bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(FindLocked(job_id).status());
  }
  // Read without mu_, so heartbeats keep flowing; one row past the cap says
  // whether there are more. The first row always goes, so paging advances.
  ASSIGN_OR_RETURN(std::vector<MetricRecord> rows,
                   store_->LoadMetrics(job_id, {.after_step = after_step, .last = last, .max_rows = kMaxMetricRows + 1}));
  if (max_bytes <= 0) max_bytes = 4 << 20;
  v1::GetMetricsResponse resp;
  int64_t bytes = 2;  // the truncated flag
  for (const MetricRecord& m : rows) {
    v1::MetricRow r;
    r.set_step(m.step);
    r.set_attempt(m.attempt);
    r.set_loss(m.loss);
    r.set_lr(m.lr);
    r.set_grad_norm(m.grad_norm);
    r.set_tokens(m.tokens);
    r.set_seconds(m.seconds);
    r.set_tokens_per_s(m.seconds > 0 ? m.tokens / m.seconds : 0);
    r.set_skipped(m.skipped);
    r.set_loss_scale(m.loss_scale);
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

StatusOr<LogChunk> JobManager::Logs(const std::string& job_id, int rank, int attempt, int64_t offset, int max_bytes) {
  std::string path;
  LogChunk chunk;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(Job * j, FindLocked(job_id));
    if (j->attempt == 0) return shard::FailedPrecondition("job " + job_id + " has not launched yet");
    chunk.attempt = attempt > 0 ? attempt : j->attempt;
    if (chunk.attempt > j->attempt)
      return shard::OutOfRange("job " + job_id + " has no attempt " + std::to_string(attempt));
    if (rank < 0 || rank >= j->config.parallel.world_size)
      return shard::OutOfRange("job " + job_id + " has ranks 0.." + std::to_string(j->config.parallel.world_size - 1));
    chunk.finished = chunk.attempt < j->attempt || (!Active(*j) && j->draining_attempt == 0) ||
                     j->state == v1::RESTARTING;
    path = AttemptDir(*j, chunk.attempt) + "/rank_" + std::to_string(rank) + ".log";
  }
  if (max_bytes <= 0 || max_bytes > (4 << 20)) max_bytes = 64 << 10;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    chunk.next_offset = 0;
    return chunk;
  }
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (offset < 0) offset = std::max<int64_t>(0, size - max_bytes);
  offset = std::min(offset, size);
  const int64_t n = std::min<int64_t>(max_bytes, size - offset);
  chunk.data.resize(n);
  in.seekg(offset);
  in.read(chunk.data.data(), n);
  chunk.next_offset = offset + n;
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

StatusOr<std::vector<v1::JobEvent>> JobManager::Events(const std::string& job_id, int64_t after_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(FindLocked(job_id).status());
  ASSIGN_OR_RETURN(std::vector<EventRecord> events, store_->LoadEvents(job_id, after_seq));
  return ToEvents(events);
}

StatusOr<int64_t> JobManager::Watch(const std::string& job_id, int64_t after_seq, EventSink sink,
                                    std::vector<v1::JobEvent>* past) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Job * j, FindLocked(job_id));
  ASSIGN_OR_RETURN(std::vector<EventRecord> events, store_->LoadEvents(job_id, after_seq));
  for (v1::JobEvent& ev : ToEvents(events)) past->push_back(std::move(ev));
  if (!past->empty()) *past->back().mutable_progress() = j->progress;
  int64_t id = next_watch_id_++;
  watchers_[id] = {job_id, std::move(sink)};
  return id;
}

std::vector<JobTelemetry> JobManager::Telemetry(int64_t finished_grace_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = opts_.now_ms();
  std::vector<JobTelemetry> out;
  for (const auto& [id, j] : jobs_) {
    if (!Active(*j) && finished_grace_ms >= 0 && now - j->updated_ms > finished_grace_ms) continue;
    JobTelemetry t;
    t.status = StatusOf(*j);
    t.step_seconds = j->step_hist;
    t.checkpoint_commit_seconds = j->commit_hist;
    t.checkpoints_committed = j->checkpoints_committed;
    out.push_back(std::move(t));
  }
  return out;
}

bool JobManager::Drained(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() || (!Active(*it->second) && it->second->draining_attempt == 0);
}

void JobManager::Unwatch(int64_t watch_id) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(watch_id);
}

}  // namespace shardd
