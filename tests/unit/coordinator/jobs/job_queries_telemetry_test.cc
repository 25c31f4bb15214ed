// JobQueries::Telemetry (over the owners of job_owners_test_util.h), what /metrics and the dashboard read: a heartbeat's
// step metrics move the last-step gauges, the token counter and the step-time
// histogram; per-rank RSS and step time come from each rank's heartbeat; a
// commit counts and is timed from its first report; an ended job drops out
// once the grace period has passed.
#include <gtest/gtest.h>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class JobQueriesTelemetryTest : public JobOwnersTest {
 protected:
  JobTelemetry Only(const std::string& id, int64_t grace_ms = -1) {
    for (JobTelemetry& t : owners_->queries.Telemetry(grace_ms))
      if (t.status.id() == id) return t;
    ADD_FAILURE() << id << " not exported";
    return {};
  }
  Status Beat(const std::string& id, int rank, int64_t step, int64_t rss, double step_s,
              std::vector<v1::StepMetric> metrics = {}) {
    const int attempt = Get(id).attempt();
    v1::HeartbeatRequest req;
    *req.mutable_id() = Worker(id, attempt, rank);
    req.set_state("training");
    req.set_step(step);
    req.set_rss_bytes(rss);
    req.set_step_seconds(step_s);
    for (auto& m : metrics) *req.add_metrics() = m;
    return owners_->gateway.Heartbeat(req, TokenOf(id, attempt)).status();
  }
  Status ReportShard(const std::string& id, int rank, int64_t step) {
    const std::string dir = workdir_ + "/ckpt/tiny/" + shard::StepDirName(step);
    WriteBytes(dir + "/" + shard::ShardFileName(rank, 2), std::string(100, 'a'));
    auto r = owners_->gateway.ReportCheckpoint(TinyShardReport(id, 1, rank, step, dir, 100, 8), TokenOf(id, 1));
    if (!r.ok()) ADD_FAILURE() << r.status().ToString();
    return r.status();
  }
};

v1::StepMetric Step(int64_t step, double seconds, int64_t tokens) {
  v1::StepMetric m;
  m.set_step(step);
  m.set_loss(5.0 / step);
  m.set_lr(1e-4 * step);
  m.set_grad_norm(0.25 * step);
  m.set_tokens(tokens);
  m.set_positions(2 * tokens);
  m.set_seconds(seconds);
  m.set_loss_scale(1024);
  return m;
}

TEST_F(JobQueriesTelemetryTest, HeartbeatsFeedGaugesCountersAndTheStepHistogram) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(Beat(id, 0, 3, 111 << 20, 0.3, {Step(1, 0.02, 20), Step(2, 0.3, 20), Step(3, 0.3, 10)}).ok());
  ASSERT_TRUE(Beat(id, 1, 3, 222 << 20, 0.31).ok());
  const JobTelemetry t = Only(id);
  const v1::Progress& p = t.status.progress();
  EXPECT_EQ(p.step(), 3);
  EXPECT_DOUBLE_EQ(p.lr(), 3e-4);
  EXPECT_DOUBLE_EQ(p.grad_norm(), 0.75);
  EXPECT_DOUBLE_EQ(p.loss_scale(), 1024);
  EXPECT_DOUBLE_EQ(p.step_seconds(), 0.3);
  EXPECT_EQ(p.tokens_total(), 50);
  EXPECT_LT(p.mfu(), 0) << "a CPU job's MFU is unknown";
  EXPECT_EQ(t.step_seconds.count, 3u);
  EXPECT_NEAR(t.step_seconds.sum, 0.62, 1e-12);
  EXPECT_EQ(t.step_seconds.counts[1], 0u);  // (0.005, 0.01]
  EXPECT_EQ(t.step_seconds.counts[2], 1u);  // (0.01, 0.025]: 0.02
  EXPECT_EQ(t.step_seconds.counts[6], 2u);  // (0.25, 0.5]: 0.3 twice
  ASSERT_EQ(t.status.workers_size(), 2);
  EXPECT_EQ(t.status.workers(0).rss_bytes(), 111 << 20);
  EXPECT_EQ(t.status.workers(1).rss_bytes(), 222 << 20);
  EXPECT_DOUBLE_EQ(t.status.workers(1).step_seconds(), 0.31);
  // The token counter survives in the stored progress.
  ASSERT_TRUE(Beat(id, 0, 4, 1, 0.3, {Step(4, 0.3, 4)}).ok());
  EXPECT_EQ(Get(id).progress().tokens_total(), 54);
}

TEST_F(JobQueriesTelemetryTest, CommitsAreCountedAndTimedFromTheFirstReport) {
  const std::string id = StartRunningJob();
  EXPECT_EQ(Only(id).checkpoints_committed, 0);
  ASSERT_TRUE(ReportShard(id, 0, 5).ok());
  Advance(2.0);
  ASSERT_TRUE(ReportShard(id, 1, 5).ok());
  const JobTelemetry t = Only(id);
  EXPECT_EQ(t.checkpoints_committed, 1);
  EXPECT_EQ(t.checkpoint_commit_seconds.count, 1u);
  EXPECT_DOUBLE_EQ(t.checkpoint_commit_seconds.sum, 2.0);
}

TEST_F(JobQueriesTelemetryTest, EndedJobsDropOutAfterTheGracePeriod) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(owners_->submission.Cancel(id, "test").ok());
  EXPECT_EQ(owners_->queries.Telemetry(60'000).size(), 1u);
  Advance(59);
  EXPECT_EQ(owners_->queries.Telemetry(60'000).size(), 1u);
  Advance(2);
  EXPECT_TRUE(owners_->queries.Telemetry(60'000).empty());
  EXPECT_EQ(owners_->queries.Telemetry(-1).size(), 1u) << "a negative grace keeps them";
  const std::string queued = SubmitJob({}, "other");
  Advance(3600);
  const auto left = owners_->queries.Telemetry(60'000);
  ASSERT_EQ(left.size(), 1u) << "active jobs never drop out";
  EXPECT_EQ(left[0].status.id(), queued);
}

}  // namespace
}  // namespace shardd::testing
