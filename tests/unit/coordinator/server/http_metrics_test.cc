// The /metrics page: Prometheus conventions (job_id label, a 0/1 state
// family, _total counters, histograms, build_info), label values escaped,
// unknown figures left out, and ended jobs' workers not exported.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "coordinator/server/metrics_page.h"

namespace shardd {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

std::vector<JobTelemetry> TwoJobs() {
  std::vector<JobTelemetry> jobs(2);
  v1::JobStatus& a = jobs[0].status;
  a.set_id("demo-1");
  a.set_name("demo");
  a.set_launcher("local");
  a.set_world_size(2);
  a.set_state(v1::RUNNING);
  a.set_attempt(2);
  a.set_restarts(1);
  v1::Progress* p = a.mutable_progress();
  p->set_step(120);
  p->set_total_steps(300);
  p->set_loss(0.5);
  p->set_lr(3e-4);
  p->set_grad_norm(1.25);
  p->set_loss_scale(1);
  p->set_tokens_total(123456);
  p->set_mfu(-1);
  p->set_eta_s(42);
  p->set_last_committed_step(100);
  p->set_eval_step(100);
  p->set_eval_loss(0.75);
  p->set_eval_exact_match(-1);  // not computed: no series
  p->set_pairs(8);
  p->set_rewards_accuracies(0.875);
  p->set_rewards_margins(2.5);
  auto* w = a.add_workers();
  w->set_rank(1);
  w->set_last_heartbeat_age_s(0.25);
  w->set_rss_bytes(1 << 20);
  w->set_step_seconds(0.125);
  w->set_compute_seconds(0.0625);
  w->set_straggler(true);
  w->set_step(120);
  auto* never = a.add_workers();
  never->set_rank(0);
  never->set_last_heartbeat_age_s(-1);
  for (double s : {0.004, 0.2, 0.2, 7.0}) jobs[0].step_seconds.Observe(s);
  jobs[0].checkpoint_commit_seconds.Observe(0.3);
  jobs[0].checkpoints_committed = 3;
  v1::JobStatus& b = jobs[1].status;
  b.set_id("we\"ird-2");
  b.set_state(v1::FAILED);
  b.mutable_progress()->set_mfu(0.42);
  b.mutable_progress()->set_step(3);
  b.mutable_progress()->set_loss(NAN);
  auto* gone = b.add_workers();
  gone->set_rank(0);
  gone->set_last_heartbeat_age_s(900);
  return jobs;
}

TEST(HttpMetricsTest, FollowsPrometheusConventions) {
  const std::string m = RenderMetrics(TwoJobs(), "1.2.3");
  EXPECT_TRUE(Has(m, "shardd_build_info{version=\"1.2.3\"} 1")) << m;
  EXPECT_TRUE(Has(m, "# TYPE shardd_jobs gauge")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"RUNNING\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"FAILED\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_jobs{state=\"QUEUED\"} 0")) << m;
  // State is its own family, one series per state, 1 for the current one.
  EXPECT_TRUE(Has(m, "shardd_job_state{job_id=\"demo-1\",state=\"RUNNING\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_state{job_id=\"demo-1\",state=\"SUCCEEDED\"} 0")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_info{job_id=\"demo-1\",name=\"demo\",launcher=\"local\",world_size=\"2\"} 1")) << m;
  // No per-job series carries the state or the reserved `job` label.
  EXPECT_EQ(m.find("{job="), std::string::npos) << m;
  EXPECT_EQ(m.find("shardd_job_step{job_id=\"demo-1\",state="), std::string::npos) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step{job_id=\"demo-1\"} 120")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_total_steps{job_id=\"demo-1\"} 300")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_loss{job_id=\"demo-1\"} 0.5")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_learning_rate{job_id=\"demo-1\"} 0.0003")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_grad_norm{job_id=\"demo-1\"} 1.25")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_loss_scale{job_id=\"demo-1\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_eta_seconds{job_id=\"demo-1\"} 42")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_last_committed_step{job_id=\"demo-1\"} 100")) << m;
  // The last held-out evaluation and a preference: step's rewards; none for a
  // job without them (we"ird-2), none for an exact match never computed.
  EXPECT_TRUE(Has(m, "shardd_job_eval_loss{job_id=\"demo-1\"} 0.75")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_rewards_accuracies{job_id=\"demo-1\"} 0.875")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_rewards_margins{job_id=\"demo-1\"} 2.5")) << m;
  EXPECT_EQ(m.find("shardd_job_eval_exact_match_ratio{"), std::string::npos) << m;
  EXPECT_EQ(m.find("shardd_job_eval_loss{job_id=\"we"), std::string::npos) << m;
  EXPECT_EQ(m.find("shardd_job_rewards_margins{job_id=\"we"), std::string::npos) << m;
  // Counters.
  EXPECT_TRUE(Has(m, "# TYPE shardd_job_restarts_total counter")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_restarts_total{job_id=\"demo-1\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_tokens_total{job_id=\"demo-1\"} 123456")) << m;
  EXPECT_TRUE(Has(m, "shardd_checkpoints_committed_total{job_id=\"demo-1\"} 3")) << m;
  // MFU only where known; a NaN loss spelled the Prometheus way.
  EXPECT_EQ(m.find("shardd_job_mfu_ratio{job_id=\"demo-1\"}"), std::string::npos) << m;
  EXPECT_TRUE(Has(m, "shardd_job_mfu_ratio{job_id=\"we\\\"ird-2\"} 0.42")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_loss{job_id=\"we\\\"ird-2\"} NaN")) << m;
  // Histograms: cumulative buckets, +Inf, sum and count.
  EXPECT_TRUE(Has(m, "# TYPE shardd_job_step_seconds histogram")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_bucket{job_id=\"demo-1\",le=\"0.005\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_bucket{job_id=\"demo-1\",le=\"0.25\"} 3")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_bucket{job_id=\"demo-1\",le=\"5\"} 3")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_bucket{job_id=\"demo-1\",le=\"10\"} 4")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_bucket{job_id=\"demo-1\",le=\"+Inf\"} 4")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_sum{job_id=\"demo-1\"} 7.404")) << m;
  EXPECT_TRUE(Has(m, "shardd_job_step_seconds_count{job_id=\"demo-1\"} 4")) << m;
  EXPECT_TRUE(Has(m, "shardd_checkpoint_commit_seconds_bucket{job_id=\"demo-1\",le=\"0.5\"} 1")) << m;
  EXPECT_TRUE(Has(m, "shardd_checkpoint_commit_seconds_count{job_id=\"demo-1\"} 1")) << m;
  // Per-rank figures for running jobs; none for a rank never heard from or an ended job.
  EXPECT_TRUE(Has(m, "shardd_worker_heartbeat_age_seconds{job_id=\"demo-1\",rank=\"1\"} 0.25")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_resident_memory_bytes{job_id=\"demo-1\",rank=\"1\"} 1048576")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_step_seconds{job_id=\"demo-1\",rank=\"1\"} 0.125")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_step{job_id=\"demo-1\",rank=\"1\"} 120")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_compute_seconds{job_id=\"demo-1\",rank=\"1\"} 0.0625")) << m;
  EXPECT_TRUE(Has(m, "shardd_worker_straggler{job_id=\"demo-1\",rank=\"1\"} 1")) << m;
  EXPECT_EQ(m.find("rank=\"0\""), std::string::npos) << "no rank 0 series: never heard from / job ended\n" << m;
}

TEST(HttpMetricsTest, EveryFamilyHasHelpAndTypeOnce) {
  const std::string m = RenderMetrics(TwoJobs(), "v");
  size_t at = 0;
  std::map<std::string, int> types;
  while ((at = m.find("# TYPE ", at)) != std::string::npos) {
    at += 7;
    ++types[m.substr(at, m.find(' ', at) - at)];
  }
  for (const auto& [name, n] : types) {
    EXPECT_EQ(n, 1) << name;
    EXPECT_NE(m.find("# HELP " + name + " "), std::string::npos) << name;
  }
  EXPECT_GE(types.size(), 20u);
}

}  // namespace
}  // namespace shardd
