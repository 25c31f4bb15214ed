// The /metrics page: Prometheus text with jobs by state, per-job gauges and
// label values escaped.
#include <gtest/gtest.h>

#include "coordinator/server/http_server.h"

namespace shardd {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(HttpMetricsTest, RendersJobsByStateAndPerJobGauges) {
  std::vector<v1::JobStatus> jobs(2);
  jobs[0].set_id("demo-1");
  jobs[0].set_state(v1::RUNNING);
  jobs[0].set_attempt(2);
  jobs[0].set_restarts(1);
  jobs[0].mutable_progress()->set_step(120);
  jobs[0].mutable_progress()->set_total_steps(300);
  jobs[0].mutable_progress()->set_loss(0.5);
  jobs[0].mutable_progress()->set_last_committed_step(100);
  auto* w = jobs[0].add_workers();
  w->set_rank(1);
  w->set_last_heartbeat_age_s(0.25);
  auto* never = jobs[0].add_workers();
  never->set_rank(0);
  never->set_last_heartbeat_age_s(-1);
  jobs[1].set_id("we\"ird-2");
  jobs[1].set_state(v1::FAILED);
  const std::string m = RenderMetrics(jobs);
  EXPECT_TRUE(Has(m, "# TYPE shardd_jobs gauge")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"RUNNING\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"FAILED\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"QUEUED\"} 0")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step{job=\"demo-1\",state=\"RUNNING\"} 120")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_total_steps{job=\"demo-1\",state=\"RUNNING\"} 300")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_loss{job=\"demo-1\",state=\"RUNNING\"} 0.5")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_attempt{job=\"demo-1\",state=\"RUNNING\"} 2")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_restarts{job=\"demo-1\",state=\"RUNNING\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_last_committed_step{job=\"demo-1\",state=\"RUNNING\"} 100")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_heartbeat_age_seconds{job=\"demo-1\",rank=\"1\"} 0.25")) << m;
  EXPECT_EQ(m.find("rank=\"0\""), std::string::npos) << "a worker never heard from has no age";
  EXPECT_TRUE(Has(m, "shardd_job_step{job=\"we\\\"ird-2\",state=\"FAILED\"} 0")) << m;
}

}  // namespace
}  // namespace shardd
