#include "coordinator/report/report_writer.h"

#include <chrono>
#include <filesystem>

#include "shard/common/logging.h"

namespace fs = std::filesystem;

namespace shardd {

shard::StatusOr<RunReportInput> CollectRunReport(JobManager* jobs, const std::string& job_id) {
  RunReportInput in;
  ASSIGN_OR_RETURN(in.job, jobs->Get(job_id));
  ASSIGN_OR_RETURN(in.events, jobs->Events(job_id, 0));
  ASSIGN_OR_RETURN(in.checkpoints, jobs->Checkpoints(job_id));
  int64_t after = 0;
  while (true) {
    ASSIGN_OR_RETURN(v1::GetMetricsResponse page, jobs->Metrics(job_id, after, 0, int64_t{64} << 20));
    for (auto& r : *page.mutable_rows()) in.rows.push_back(std::move(r));
    if (!page.truncated() || page.rows().empty()) break;
    after = in.rows.back().step();
  }
  in.generated_unix_ms = jobs->now_ms();
  return in;
}

ReportWriter::ReportWriter(JobManager* jobs, double interval_s) : jobs_(jobs), interval_s_(interval_s) {}

ReportWriter::~ReportWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReportWriter::Start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      Pass();
      lock.lock();
      cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stop_; });
    }
  });
}

void ReportWriter::Flush() { Pass(); }

void ReportWriter::Pass() {
  std::lock_guard<std::mutex> lock(pass_mu_);
  for (const v1::JobStatus& j : jobs_->List(/*include_finished=*/true)) {
    if (!IsTerminal(j.state()) || done_.count(j.id()) || j.checkpoint_dir().empty()) continue;
    done_.insert(j.id());
    const fs::path path = fs::path(j.checkpoint_dir()) / kReportFileName;
    std::error_code ec;
    const auto mtime = fs::last_write_time(path, ec);
    if (!ec) {
      const auto written_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::file_clock::to_sys(mtime).time_since_epoch()).count();
      if (written_ms >= j.updated_unix_ms()) continue;
    }
    auto in = CollectRunReport(jobs_, j.id());
    shard::Status st = in.ok() ? WriteRunReport(*in, path.string()) : in.status();
    if (st.ok()) LOG_INFO("job {}: run report {}", j.id(), path.string());
    else LOG_WARN("job {}: no run report: {}", j.id(), st.message());
  }
}

}  // namespace shardd
