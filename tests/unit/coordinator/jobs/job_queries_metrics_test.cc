// JobQueries::Metrics (over the owners of job_owners_test_util.h), the read side of rank 0's per-step metrics: what a
// heartbeat carried comes back (the loss scaler's skipped steps and scales
// included) in step order, selected by after_step and the last N, cut to the
// response's byte budget and row cap with `truncated` set, the newest
// attempt's row for a redone step, and NOT_FOUND naming an unknown job.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <limits>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

// The fixture's job holds at most 4 x 16 = 64 tokens a step (train.global_batch x data.seq_len).
v1::StepMetric Metric(int64_t step, double loss, double seconds = 0.5, int64_t tokens = 64) {
  v1::StepMetric m;
  m.set_step(step);
  m.set_loss(loss);
  m.set_lr(1e-3);
  m.set_grad_norm(0.5);
  m.set_tokens(tokens);
  m.set_seconds(seconds);
  m.set_loss_scale(1);
  return m;
}

class JobQueriesMetricsTest : public JobOwnersTest {
 protected:
  // Rank 0 of the current attempt heartbeats these metrics.
  void Report(const std::string& id, int64_t step, std::vector<v1::StepMetric> metrics) {
    const int attempt = Get(id).attempt();
    auto r = Heartbeat(id, attempt, 0, step, TokenOf(id, attempt), std::move(metrics));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // Steps 1..n, one heartbeat.
  void ReportSteps(const std::string& id, int64_t n) {
    std::vector<v1::StepMetric> ms;
    for (int64_t s = 1; s <= n; ++s) ms.push_back(Metric(s, 10.0 / s));
    Report(id, n, ms);
  }
  std::vector<int64_t> Steps(const std::string& id, int64_t after_step, int64_t last) {
    auto r = owners_->queries.Metrics(id, after_step, last, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<int64_t> out;
    if (r.ok())
      for (const auto& row : r->rows()) out.push_back(row.step());
    return out;
  }
};

TEST_F(JobQueriesMetricsTest, HeartbeatMetricsComeBackWithTheLossScalersVerdict) {
  const std::string id = StartRunningJob();
  v1::StepMetric skipped = Metric(2, std::numeric_limits<double>::infinity());
  skipped.set_grad_norm(std::nan(""));
  skipped.set_skipped(true);
  skipped.set_loss_scale(65536);
  v1::StepMetric after = Metric(3, 3.0, 0.25, 32);
  after.set_loss_scale(32768);
  v1::StepMetric no_time = Metric(4, 2.5, 0);
  Report(id, 4, {Metric(1, 4.0), skipped, after, no_time});

  auto r = owners_->queries.Metrics(id, 0, 0, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->truncated());
  ASSERT_EQ(r->rows_size(), 4);
  const v1::MetricRow& first = r->rows(0);
  EXPECT_EQ(first.step(), 1);
  EXPECT_EQ(first.attempt(), 1);
  EXPECT_DOUBLE_EQ(first.loss(), 4.0);
  EXPECT_DOUBLE_EQ(first.lr(), 1e-3);
  EXPECT_DOUBLE_EQ(first.grad_norm(), 0.5);
  EXPECT_EQ(first.tokens(), 64);
  EXPECT_DOUBLE_EQ(first.seconds(), 0.5);
  EXPECT_DOUBLE_EQ(first.tokens_per_s(), 128);
  EXPECT_FALSE(first.skipped());
  EXPECT_DOUBLE_EQ(first.loss_scale(), 1);
  EXPECT_TRUE(r->rows(1).skipped());
  EXPECT_DOUBLE_EQ(r->rows(1).loss_scale(), 65536);
  EXPECT_TRUE(std::isinf(r->rows(1).loss()));
  EXPECT_TRUE(std::isnan(r->rows(1).grad_norm()));
  EXPECT_FALSE(r->rows(2).skipped());
  EXPECT_DOUBLE_EQ(r->rows(2).loss_scale(), 32768);
  EXPECT_DOUBLE_EQ(r->rows(2).tokens_per_s(), 128);
  EXPECT_EQ(r->rows(3).tokens_per_s(), 0) << "no time measured: no rate";

  // Only rank 0 reports metrics, but the step survives as the job's progress too.
  EXPECT_EQ(Get(id).progress().step(), 4);
}

TEST_F(JobQueriesMetricsTest, AfterStepAndLastSelectTheSteps) {
  const std::string id = StartRunningJob();
  using V = std::vector<int64_t>;
  EXPECT_EQ(Steps(id, 0, 0), V{}) << "no heartbeat with metrics yet";
  ReportSteps(id, 10);
  EXPECT_EQ(Steps(id, 0, 0), (V{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(Steps(id, 7, 0), (V{8, 9, 10}));
  EXPECT_EQ(Steps(id, 0, 2), (V{9, 10}));
  EXPECT_EQ(Steps(id, 7, 5), (V{8, 9, 10}));
  EXPECT_EQ(Steps(id, 0, 50), (V{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(Steps(id, 10, 0), V{});
}

TEST_F(JobQueriesMetricsTest, AResponseStopsAtItsByteBudgetAndPagesOn) {
  const std::string id = StartRunningJob();
  ReportSteps(id, 50);
  const int64_t budget = 800;  // a handful of rows
  std::vector<int64_t> seen;
  int64_t after = 0;
  int calls = 0;
  while (true) {
    auto r = owners_->queries.Metrics(id, after, 0, budget);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ++calls;
    EXPECT_LE(static_cast<int64_t>(r->ByteSizeLong()), budget);
    ASSERT_GT(r->rows_size(), 0);
    for (const auto& row : r->rows()) seen.push_back(row.step());
    if (!r->truncated()) break;
    after = r->rows(r->rows_size() - 1).step();
    ASSERT_LT(calls, 50) << "paging does not advance";
  }
  EXPECT_GT(calls, 2) << "800 bytes cannot hold 50 rows";
  ASSERT_EQ(seen.size(), 50u);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(seen[i], i + 1);

  // A budget below one row still returns one, so a client always advances.
  auto one = owners_->queries.Metrics(id, 0, 0, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->rows_size(), 1);
  EXPECT_TRUE(one->truncated());
  // The last N, cut by the budget, start at the first of those N.
  auto tail = owners_->queries.Metrics(id, 0, 20, budget);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(tail->truncated());
  EXPECT_EQ(tail->rows(0).step(), 31);
}

TEST_F(JobQueriesMetricsTest, NoResponseHoldsMoreThanTheRowCap) {
  const std::string id = StartRunningJob();
  std::vector<shard::StepMetrics> rows;
  for (int64_t s = 1; s <= JobQueries::kMaxMetricRows + 5; ++s) rows.push_back({.step = s, .attempt = 1, .loss = 1});
  ASSERT_TRUE(store_->PutMetrics(id, rows).ok());
  auto r = owners_->queries.Metrics(id, 0, 0, int64_t{1} << 40);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rows_size(), JobQueries::kMaxMetricRows);
  EXPECT_TRUE(r->truncated());
  auto rest = owners_->queries.Metrics(id, r->rows(r->rows_size() - 1).step(), 0, int64_t{1} << 40);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->rows_size(), 5);
  EXPECT_FALSE(rest->truncated());
}

TEST_F(JobQueriesMetricsTest, ARedoneStepIsTheNewestAttempts) {
  const std::string id = StartRunningJob();
  Report(id, 3, {Metric(1, 4.0), Metric(2, 3.5), Metric(3, 3.25)});
  launcher_.Exit(id, 1, 1, 0, SIGKILL);
  owners_->loop.Tick();
  launcher_.Exit(id, 1, 0, 0, SIGTERM);
  launcher_.SetRunning(id, 1, 0);
  Advance(3.1);
  owners_->loop.Tick();
  ASSERT_EQ(Get(id).attempt(), 2);
  RegisterAll(id);
  Report(id, 2, {Metric(2, 3.4)});  // nothing was committed: attempt 2 starts over
  auto r = owners_->queries.Metrics(id, 0, 0, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows_size(), 3);
  EXPECT_EQ(r->rows(0).attempt(), 1);
  EXPECT_EQ(r->rows(1).attempt(), 2);
  EXPECT_DOUBLE_EQ(r->rows(1).loss(), 3.4);
  EXPECT_EQ(r->rows(2).attempt(), 1) << "not redone yet";
}

TEST_F(JobQueriesMetricsTest, AnUnknownJobIsNotFoundNamingIt) {
  auto r = owners_->queries.Metrics("nope-1", 0, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(r.status().message(), "nope-1")) << r.status().ToString();
}

}  // namespace
}  // namespace shardd::testing
