// The WorkerGateway's checks (over the owners of job_owners_test_util.h) on rank 0's per-step reports (coordinator/jobs/worker_reports.h):
// a row out of range (a step past train.steps or before 1, a negative or
// impossible token count, a non-finite loss on a step the loss scaler did
// not skip) is not stored or counted and is said once per attempt as an
// event, while the heartbeat that carried it still counts as a sign of life;
// the token counter never wraps; a done report past the job's end is
// refused; a NaN final loss stays NaN in the job's status and reason; and a
// preference: job's rows keep TRL's metrics (pairs in range, figures finite).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "coordinator/jobs/worker_reports.h"
#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A well-formed row of the fixture's job (at most 4 x 16 = 64 tokens a step).
v1::StepMetric Row(int64_t step, double loss = 2.0, int64_t tokens = 64) {
  v1::StepMetric m;
  m.set_step(step);
  m.set_loss(loss);
  m.set_lr(1e-3);
  m.set_grad_norm(0.5);
  m.set_tokens(tokens);
  m.set_positions(tokens);
  m.set_seconds(0.5);
  m.set_loss_scale(1);
  return m;
}

class WorkerGatewayReportsTest : public JobOwnersTest {
 protected:
  std::vector<int64_t> StoredSteps(const std::string& id) {
    auto r = owners_->queries.Metrics(id, 0, 0, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<int64_t> out;
    if (r.ok())
      for (const auto& row : r->rows()) out.push_back(row.step());
    return out;
  }
  Status Done(const std::string& id, int rank, int64_t step, double loss, bool nothing_trained = false) {
    v1::ReportDoneRequest req;
    *req.mutable_id() = Worker(id, 1, rank);
    req.set_step(step);
    req.set_final_loss(loss);
    req.set_nothing_trained(nothing_trained);
    return owners_->gateway.ReportDone(req, TokenOf(id, 1));
  }
};

TEST_F(WorkerGatewayReportsTest, RowsOutOfRangeAreNeitherStoredNorCounted) {
  const std::string id = StartRunningJob();
  v1::StepMetric negative = Row(2, 2.0, -1'000'000);
  v1::StepMetric absurd = Row(3, 2.0, 65);  // one more than the global batch holds
  v1::StepMetric nan_trained = Row(4, kNaN);  // not skipped: the trainer would have failed it
  v1::StepMetric past_end = Row(101);         // train.steps is 100
  v1::StepMetric before_start = Row(0);
  v1::StepMetric bad_positions = Row(5);
  bad_positions.set_positions(kMax);
  v1::StepMetric bad_seconds = Row(6);
  bad_seconds.set_seconds(-1);
  v1::StepMetric bad_compute = Row(6);
  bad_compute.set_compute_seconds(kNaN);
  Advance(8);
  auto hb = Heartbeat(id, 1, 0, 7, TokenOf(id, 1),
                      {Row(1), negative, absurd, nan_trained, past_end, before_start, bad_positions, bad_seconds,
                       bad_compute, Row(7)});
  ASSERT_TRUE(hb.ok()) << "a bad row is refused, not the heartbeat: " << hb.status().ToString();
  EXPECT_DOUBLE_EQ(Get(id).workers(0).last_heartbeat_age_s(), 0) << "the heartbeat still counts as alive";

  EXPECT_EQ(StoredSteps(id), (std::vector<int64_t>{1, 7}));
  const v1::Progress p = Get(id).progress();
  EXPECT_EQ(p.tokens_total(), 128) << "only the accepted rows are counted";
  EXPECT_EQ(p.step(), 7);
  EXPECT_DOUBLE_EQ(p.loss(), 2.0);
  // Said once per attempt, naming the first refused row's field.
  auto refused = EventsOf(id, "report_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "step 2: tokens -1000000 out of range 0..64")) << refused[0].message();
  ASSERT_TRUE(Heartbeat(id, 1, 0, 8, TokenOf(id, 1), {Row(8, 2.0, -5)}).ok());
  EXPECT_EQ(EventsOf(id, "report_refused").size(), 1u);
  EXPECT_EQ(Get(id).progress().tokens_total(), 128);
}

TEST_F(WorkerGatewayReportsTest, ASkippedStepKeepsItsNonFiniteLossAsTheTruth) {
  const std::string id = StartRunningJob();
  v1::StepMetric skipped = Row(2, kNaN);
  skipped.set_grad_norm(kNaN);
  skipped.set_skipped(true);
  skipped.set_loss_scale(65536);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 2, TokenOf(id, 1), {Row(1, 3.0), skipped}).ok());
  EXPECT_EQ(StoredSteps(id), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(std::isnan(Get(id).progress().loss())) << "the last step's loss, not the finite one before it";
  EXPECT_TRUE(EventsOf(id, "report_refused").empty());
}

TEST_F(WorkerGatewayReportsTest, ANaNFinalLossNeverReadsAsAFiniteFigure) {
  const std::string id = StartRunningJob();
  ASSERT_TRUE(Heartbeat(id, 1, 0, 99, TokenOf(id, 1), {Row(99, 1.5)}).ok());
  ASSERT_TRUE(Done(id, 0, 100, kNaN).ok());
  ASSERT_TRUE(Done(id, 1, 100, kNaN).ok());
  const v1::JobStatus s = Get(id);
  EXPECT_EQ(s.state(), v1::SUCCEEDED);
  EXPECT_TRUE(std::isnan(s.progress().loss())) << s.progress().loss();
  EXPECT_TRUE(Contains(s.reason(), "final loss nan (not finite")) << s.reason();
}

TEST_F(WorkerGatewayReportsTest, DonePastTheJobsEndIsRefused) {
  const std::string id = StartRunningJob();
  Status past = Done(id, 0, 101, 1.0);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument) << past.ToString();
  EXPECT_TRUE(Contains(past.message(), "done at step 101, outside 0..100 (train.steps)")) << past.message();
  EXPECT_EQ(Done(id, 1, -1, 1.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(State(id), v1::RUNNING);
  EXPECT_EQ(Get(id).progress().step(), 0);
  // Resumed past the end: the checkpoint's step is the truth, nothing trained.
  ASSERT_TRUE(Done(id, 0, 150, 0, /*nothing_trained=*/true).ok());
  ASSERT_TRUE(Done(id, 1, 150, 0, /*nothing_trained=*/true).ok());
  EXPECT_EQ(State(id), v1::SUCCEEDED);
  EXPECT_EQ(Get(id).progress().step(), 150);
}

// A preference: job's rows reach the store with TRL's metrics; its batch
// counts pairs (two rows each), so a step holds up to twice the SFT tokens.
TEST_F(WorkerGatewayReportsTest, APreferenceJobsRowsKeepTheirRewards) {
  WriteBytes(workdir_ + "/data/pairs.jsonl", R"({"prompt": "rev ab=", "chosen": "ba", "rejected": "ab"})" "\n");
  auto st = owners_->submission.Submit(Spec(JobYaml("pref", "preference: {method: dpo}\n"),
                                  {"data.tokens=", "data.jsonl=data/pairs.jsonl"}));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::string id = st->id();
  owners_->loop.Tick();
  RegisterAll(id);
  ASSERT_EQ(State(id), v1::RUNNING);
  v1::StepMetric dpo = Row(1, 0.6931, 100);  // 4 pairs x 2 rows x 16 = 128 tokens at most
  dpo.set_pairs(4);
  (*dpo.mutable_figures())["rewards_chosen"] = 0.125;
  (*dpo.mutable_figures())["rewards_rejected"] = -0.25;
  (*dpo.mutable_figures())["rewards_accuracies"] = 0.75;
  (*dpo.mutable_figures())["rewards_margins"] = 0.375;
  (*dpo.mutable_figures())["logps_chosen"] = -12.5;
  (*dpo.mutable_figures())["logps_rejected"] = -20.25;
  v1::StepMetric too_many = Row(2);
  too_many.set_pairs(5);
  v1::StepMetric bad_accuracy = dpo;
  bad_accuracy.set_step(3);
  (*bad_accuracy.mutable_figures())["rewards_accuracies"] = 1.5;
  ASSERT_TRUE(Heartbeat(id, 1, 0, 3, TokenOf(id, 1), {dpo, too_many, bad_accuracy}).ok());
  auto r = owners_->queries.Metrics(id, 0, 0, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows_size(), 1);
  const v1::MetricRow& row = r->rows(0);
  EXPECT_EQ(row.tokens(), 100);
  EXPECT_EQ(row.pairs(), 4);
  EXPECT_DOUBLE_EQ(row.rewards_chosen(), 0.125);
  EXPECT_DOUBLE_EQ(row.rewards_rejected(), -0.25);
  EXPECT_DOUBLE_EQ(row.rewards_accuracies(), 0.75);
  EXPECT_DOUBLE_EQ(row.rewards_margins(), 0.375);
  EXPECT_DOUBLE_EQ(row.logps_chosen(), -12.5);
  EXPECT_DOUBLE_EQ(row.logps_rejected(), -20.25);
  auto refused = EventsOf(id, "report_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0].message(), "step 2: pairs 5 out of range 0..4 (train.global_batch)"))
      << refused[0].message();
}

TEST(WorkerReportsTest, TheCounterSaturatesAndNeverGoesNegative) {
  EXPECT_EQ(AddToCounter(kMax - 10, 64), kMax);
  EXPECT_EQ(AddToCounter(kMax, kMax), kMax);
  EXPECT_EQ(AddToCounter(-5, 3), 3) << "a negative total from an older database counts from 0";
  EXPECT_EQ(AddToCounter(5, -3), 5);
  EXPECT_EQ(AddToCounter(5, 3), 8);
}

TEST(WorkerReportsTest, LimitsComeFromTheJobAndSaturate) {
  shard::JobConfig job;
  job.train.steps = 30;
  job.train.global_batch = 8;
  job.data.seq_len = 128;
  StepReportLimits l = StepReportLimitsFor(job);
  EXPECT_EQ(l.total_steps, 30);
  EXPECT_EQ(l.max_tokens, 1024);
  job.train.global_batch = int64_t{1} << 40;
  job.data.seq_len = int64_t{1} << 40;
  EXPECT_EQ(StepReportLimitsFor(job).max_tokens, kMax);
  // Each field names itself.
  l = {30, 1024};
  v1::StepMetric m = Row(3);
  EXPECT_TRUE(CheckStepMetric(m, l).ok());
  m.set_lr(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "step 3: lr inf")) << CheckStepMetric(m, l).message();
  m = Row(3);
  m.set_grad_norm(kNaN);
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "grad_norm nan")) << CheckStepMetric(m, l).message();
  m.set_skipped(true);
  EXPECT_TRUE(CheckStepMetric(m, l).ok());
  m = Row(3);
  m.set_eval_samples(-1);
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "eval_samples -1")) << CheckStepMetric(m, l).message();
  m = Row(3);
  m.set_loss_scale(-2);
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "loss_scale -2")) << CheckStepMetric(m, l).message();
  // Pairs only in a preference: job, at most train.global_batch of them.
  m = Row(3);
  m.set_pairs(1);
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "pairs 1 out of range 0..0 (the job has no preference:)"))
      << CheckStepMetric(m, l).message();
  job.train.global_batch = 8;
  job.data.seq_len = 128;
  job.preference.method = shard::PreferenceMethod::kDpo;
  l = StepReportLimitsFor(job);
  EXPECT_EQ(l.max_tokens, 2048) << "8 pairs, two rows of 128 each";
  EXPECT_EQ(l.max_pairs, 8);
  m.set_tokens(2048);
  EXPECT_TRUE(CheckStepMetric(m, l).ok()) << CheckStepMetric(m, l).message();
  (*m.mutable_figures())["rewards_margins"] = kNaN;
  EXPECT_TRUE(Contains(CheckStepMetric(m, l).message(), "step 3: rewards_margins nan is not finite"))
      << CheckStepMetric(m, l).message();
  m.set_skipped(true);
  EXPECT_TRUE(CheckStepMetric(m, l).ok()) << "a skipped step may hold NaN figures";
}

// eval: on held-out pairs: eval_pairs only in a preference: job and equal to
// eval_samples, its eval/ figures finite (an evaluation skips nothing), the
// accuracy a share.
TEST(WorkerReportsTest, PairEvaluationsAreChecked) {
  shard::JobConfig job;
  job.train.steps = 30;
  job.train.global_batch = 8;
  job.data.seq_len = 128;
  StepReportLimits sft = StepReportLimitsFor(job);
  job.preference.method = shard::PreferenceMethod::kDpo;
  const StepReportLimits pref = StepReportLimitsFor(job);
  v1::StepMetric m = Row(3);
  m.set_pairs(8);
  m.set_eval_samples(4);
  m.set_eval_loss(0.625);
  m.set_eval_pairs(4);
  (*m.mutable_figures())["eval_rewards_chosen"] = 0.0625;
  (*m.mutable_figures())["eval_rewards_rejected"] = -0.125;
  (*m.mutable_figures())["eval_rewards_accuracies"] = 0.75;
  (*m.mutable_figures())["eval_rewards_margins"] = 0.1875;
  (*m.mutable_figures())["eval_logps_chosen"] = -14.5;
  (*m.mutable_figures())["eval_logps_rejected"] = -18.75;
  EXPECT_TRUE(CheckStepMetric(m, pref).ok()) << CheckStepMetric(m, pref).message();
  auto refused = [&](const v1::StepMetric& bad, const StepReportLimits& l, const std::string& says) {
    const shard::Status st = CheckStepMetric(bad, l);
    EXPECT_TRUE(Contains(st.message(), says)) << st.message() << " should say " << says;
  };
  v1::StepMetric bad = m;
  bad.set_eval_pairs(-1);
  refused(bad, pref, "step 3: eval_pairs -1 is negative");
  v1::StepMetric sft_eval = Row(3);  // an SFT eval: samples, no pairs
  sft_eval.set_eval_samples(4);
  sft_eval.set_eval_loss(3.5);
  EXPECT_TRUE(CheckStepMetric(sft_eval, sft).ok());
  sft_eval.set_eval_pairs(4);
  refused(sft_eval, sft, "step 3: eval_pairs 4 in a job with no preference:");
  bad = m;
  bad.set_eval_samples(5);
  refused(bad, pref, "step 3: eval_pairs 4 but eval_samples 5");
  bad = m;
  (*bad.mutable_figures())["eval_rewards_accuracies"] = 1.25;
  refused(bad, pref, "step 3: eval_rewards_accuracies 1.25 is outside 0..1");
  (*bad.mutable_figures())["eval_rewards_accuracies"] = -0.5;
  refused(bad, pref, "eval_rewards_accuracies -0.5 is outside 0..1");
  bad = m;
  (*bad.mutable_figures())["eval_logps_chosen"] = -std::numeric_limits<double>::infinity();
  refused(bad, pref, "step 3: eval_logps_chosen -inf is not finite");
  bad = m;
  (*bad.mutable_figures())["eval_nll"] = kNaN;
  bad.set_skipped(true);  // the step's own figures may be NaN then; the evaluation's not
  refused(bad, pref, "step 3: eval_nll nan is not finite");
  bad = m;
  bad.set_eval_pairs(0);  // no evaluation on pairs: stray figures are not looked at (the codec drops them)
  (*bad.mutable_figures())["eval_rewards_accuracies"] = 7;
  EXPECT_TRUE(CheckStepMetric(bad, pref).ok()) << CheckStepMetric(bad, pref).message();
}

}  // namespace
}  // namespace shardd::testing
