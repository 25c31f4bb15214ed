// The SQLite state store's records: every record kind round-trips (binary
// blobs included: specs are serialized protobuf), writes replace by key, an
// event and its job land together or not at all, everything survives a
// reopen, metric queries select by step, and a preference: step keeps TRL's
// metrics (and eval/ metrics of an evaluation on held-out pairs). Databases
// from older versions: state_store_older_versions_test.cc; the database file
// and its folder: state_store_files_test.cc.
#include "coordinator/state/state_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/unit/coordinator/state/state_store_test_util.h"

namespace shardd::testing {
namespace {

TEST_F(StateStoreTest, JobsRoundTripReplaceAndComeBackInNumberOrder) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(*s->MaxJobNumber(), 0);
  ASSERT_TRUE(s->PutJob(Job("tiny-10")).ok());
  ASSERT_TRUE(s->PutJob(Job("tiny-2")).ok());
  ASSERT_TRUE(s->PutJob(Job("a-b-3")).ok());
  JobRecord updated = Job("tiny-2", 3);
  updated.reason = "running";
  ASSERT_TRUE(s->PutJob(updated).ok());

  auto jobs = s->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, "tiny-2");
  EXPECT_EQ((*jobs)[1].id, "a-b-3");
  EXPECT_EQ((*jobs)[2].id, "tiny-10");
  ExpectSameJob((*jobs)[0], updated);
  ExpectSameJob((*jobs)[2], Job("tiny-10"));
  EXPECT_EQ(*s->MaxJobNumber(), 10);
}

TEST_F(StateStoreTest, WorkersAreKeptPerAttempt) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->PutWorker({"tiny-1", 1, 1, 101, "", "launched"}).ok());
  ASSERT_TRUE(s->PutWorker({"tiny-1", 1, 0, 100, "", "launched"}).ok());
  ASSERT_TRUE(s->PutWorker({"tiny-1", 2, 0, 200, "", "launched"}).ok());
  ASSERT_TRUE(s->PutWorker({"tiny-1", 1, 0, 100, "node-a", "registered"}).ok());
  auto w = s->LoadWorkers("tiny-1", 1);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 2u);
  EXPECT_EQ((*w)[0].rank, 0);
  EXPECT_EQ((*w)[0].pid, 100);
  EXPECT_EQ((*w)[0].hostname, "node-a");
  EXPECT_EQ((*w)[0].state, "registered");
  EXPECT_EQ((*w)[1].pid, 101);
  EXPECT_EQ(s->LoadWorkers("tiny-1", 2)->size(), 1u);
  EXPECT_TRUE(s->LoadWorkers("tiny-1", 3)->empty());
  EXPECT_TRUE(s->LoadWorkers("other-1", 1)->empty());
}

TEST_F(StateStoreTest, EventsAppendWithTheirJobAndLoadAfterASeq) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  JobRecord j = Job("tiny-1");
  for (int64_t seq = 1; seq <= 3; ++seq) {
    j.seq = seq;
    j.state = static_cast<int>(seq);
    ASSERT_TRUE(s->AppendEvent({"tiny-1", seq, 1000 + seq, 1, "kind" + std::to_string(seq), "m", j.state}, j).ok());
  }
  ASSERT_TRUE(s->AppendEvent({"other-2", 1, 5, 1, "submitted", "", 1}, Job("other-2")).ok());
  auto all = s->LoadEvents("tiny-1", 0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*all)[i].seq, i + 1);
    EXPECT_EQ((*all)[i].unix_ms, 1001 + i);
    EXPECT_EQ((*all)[i].kind, "kind" + std::to_string(i + 1));
    EXPECT_EQ((*all)[i].state, i + 1);
  }
  auto tail = s->LoadEvents("tiny-1", 2);
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].seq, 3);
  EXPECT_EQ(s->LoadJobs()->front().seq, 3);

  // A duplicate seq fails and leaves the job as it was (one transaction).
  JobRecord changed = j;
  changed.reason = "must not be stored";
  changed.seq = 99;
  EXPECT_FALSE(s->AppendEvent({"tiny-1", 3, 0, 1, "dup", "", 1}, changed).ok());
  auto jobs = s->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->front().seq, 3);
  EXPECT_EQ(jobs->front().reason, j.reason);
  EXPECT_EQ(s->LoadEvents("tiny-1", 0)->size(), 3u);
  // ... and the store still works afterwards (the transaction was closed).
  ASSERT_TRUE(s->PutJob(changed).ok());
  EXPECT_EQ(s->LoadJobs()->front().seq, 99);
}

TEST_F(StateStoreTest, CheckpointsAndMetricsRoundTrip) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->PutCheckpoint({"tiny-1", 40, 2, 2, 9000, "/ck/tiny/step_00000040", 77}).ok());
  ASSERT_TRUE(s->PutCheckpoint({"tiny-1", 20, 2, 2, 8000, "/ck/tiny/step_00000020", 55}).ok());
  ASSERT_TRUE(s->PutCheckpoint({"tiny-1", 45, 2, 2, 9000, "/dev/shm/shardd/tiny-0/step_00000045", 88, "memory"}).ok());
  auto c = s->LoadCheckpoints("tiny-1");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0].step, 20);
  EXPECT_EQ((*c)[0].tier, "disk");  // the tier is recorded: disk unless said
  EXPECT_EQ((*c)[2].tier, "memory");
  ASSERT_TRUE(s->DeleteCheckpoint("tiny-1", 45).ok());
  EXPECT_EQ((*c)[1].bytes, 9000);
  EXPECT_EQ((*c)[1].path, "/ck/tiny/step_00000040");
  EXPECT_EQ((*c)[1].committed_ms, 77);
  ASSERT_TRUE(s->DeleteCheckpoint("tiny-1", 20).ok());
  EXPECT_EQ(s->LoadCheckpoints("tiny-1")->size(), 1u);

  ASSERT_TRUE(s->PutMetrics("tiny-1", {shard::StepMetrics{.step = 2, .attempt = 1, .loss = 3.5, .lr = 1e-3, .grad_norm = 0.7, .seconds = 0.25, .tokens = 512},
                                       shard::StepMetrics{.step = 1, .attempt = 1, .loss = 4.0, .lr = 5e-4, .grad_norm = 0.9, .seconds = 0.5, .tokens = 512}}).ok());
  ASSERT_TRUE(s->PutMetrics("tiny-1", {}).ok());
  ASSERT_TRUE(s->PutMetrics("tiny-1", {shard::StepMetrics{.step = 2, .attempt = 2, .loss = 3.25, .lr = 1e-3, .grad_norm = 0.6, .seconds = 0.3, .tokens = 512}}).ok());  // attempt 2 redoes step 2
  auto m = s->LoadMetrics("tiny-1");
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].step, 1);
  EXPECT_DOUBLE_EQ((*m)[0].loss, 4.0);
  EXPECT_DOUBLE_EQ((*m)[0].lr, 5e-4);
  EXPECT_DOUBLE_EQ((*m)[0].grad_norm, 0.9);
  EXPECT_DOUBLE_EQ((*m)[0].seconds, 0.5);
  EXPECT_EQ((*m)[0].tokens, 512);
  EXPECT_EQ((*m)[1].attempt, 2);
  EXPECT_DOUBLE_EQ((*m)[1].loss, 3.25);
  EXPECT_TRUE(s->LoadMetrics("other-1")->empty());
}

TEST_F(StateStoreTest, MetricsKeepTheLossScalersVerdict) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  const double inf = std::numeric_limits<double>::infinity();
  shard::StepMetrics skipped{.step = 1, .attempt = 1, .loss = std::nan(""), .lr = 1e-3, .grad_norm = inf,
                       .seconds = 0.5, .tokens = 256, .skipped = true, .loss_scale = 65536};
  shard::StepMetrics clean{.step = 2, .attempt = 1, .loss = 3.5, .lr = 1e-3, .grad_norm = 0.8,
                     .seconds = 0.5, .tokens = 256, .skipped = false, .loss_scale = 32768};
  ASSERT_TRUE(s->PutMetrics("tiny-1", {skipped, clean}).ok());
  auto m = s->LoadMetrics("tiny-1");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_TRUE((*m)[0].skipped);
  EXPECT_DOUBLE_EQ((*m)[0].loss_scale, 65536);
  EXPECT_TRUE(std::isnan((*m)[0].loss)) << "SQLite keeps a NaN as NULL; it must not come back as 0";
  EXPECT_EQ((*m)[0].grad_norm, inf);
  EXPECT_FALSE((*m)[1].skipped);
  EXPECT_DOUBLE_EQ((*m)[1].loss_scale, 32768);
  EXPECT_DOUBLE_EQ((*m)[1].loss, 3.5);
  EXPECT_EQ((*m)[1].eval_samples, 0);
  EXPECT_EQ((*m)[1].eval_exact_match, -1);
  // A step with a held-out evaluation (job file eval:) keeps its figures.
  shard::StepMetrics evaluated = clean;
  evaluated.step = 3;
  evaluated.eval_samples = 40;
  evaluated.eval_loss = 1.25;
  evaluated.eval_exact_match = 0.375;
  ASSERT_TRUE(s->PutMetrics("tiny-1", {evaluated}).ok());
  auto e = s->LoadMetrics("tiny-1", {.after_step = 2});
  ASSERT_TRUE(e.ok() && e->size() == 1u);
  EXPECT_EQ((*e)[0].eval_samples, 40);
  EXPECT_DOUBLE_EQ((*e)[0].eval_loss, 1.25);
  EXPECT_DOUBLE_EQ((*e)[0].eval_exact_match, 0.375);
}

TEST_F(StateStoreTest, MetricQueriesSelectStepsAfterTheLastNAndCapRows) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  std::vector<shard::StepMetrics> rows;
  for (int step = 10; step >= 1; --step) rows.push_back({.step = step, .attempt = 1, .loss = 10.0 - step});
  ASSERT_TRUE(s->PutMetrics("tiny-1", rows).ok());
  ASSERT_TRUE(s->PutMetrics("tiny-2", {{.step = 11, .attempt = 1}}).ok());
  auto steps = [&](const MetricsQuery& q) {
    std::vector<int64_t> out;
    auto m = s->LoadMetrics("tiny-1", q);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok())
      for (const shard::StepMetrics& r : *m) out.push_back(r.step);
    return out;
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(steps({}), (V{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(steps({.after_step = 7}), (V{8, 9, 10}));
  EXPECT_EQ(steps({.last = 3}), (V{8, 9, 10}));
  EXPECT_EQ(steps({.after_step = 8, .last = 3}), (V{9, 10}));
  EXPECT_EQ(steps({.max_rows = 4}), (V{1, 2, 3, 4}));
  EXPECT_EQ(steps({.last = 5, .max_rows = 2}), (V{6, 7})) << "the earliest of the last five";
  EXPECT_EQ(steps({.after_step = 3, .max_rows = 2}), (V{4, 5}));
  EXPECT_EQ(steps({.after_step = 10}), V{});
  EXPECT_DOUBLE_EQ(s->LoadMetrics("tiny-1", {.last = 1})->front().loss, 0.0);
}

// A preference: step keeps TRL's metrics; an SFT step reads back with none.
TEST_F(StateStoreTest, PreferenceStepsKeepTheirRewardsAndLogps) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  shard::StepMetrics dpo{.step = 1, .attempt = 1, .loss = 0.6931, .lr = 1e-3, .grad_norm = 0.5, .tokens = 96};
  dpo.pairs = 8;
  dpo.rewards_chosen = 0.125;
  dpo.rewards_rejected = -0.25;
  dpo.rewards_accuracies = 0.875;
  dpo.rewards_margins = 0.375;
  dpo.logps_chosen = -12.5;
  dpo.logps_rejected = -20.25;
  dpo.nll = 1.5;
  shard::StepMetrics skipped = dpo;  // the loss scaler's skipped step: NaN figures stay NaN
  skipped.step = 2;
  skipped.skipped = true;
  skipped.rewards_chosen = std::nan("");
  ASSERT_TRUE(s->PutMetrics("pref-1", {dpo, skipped}).ok());
  ASSERT_TRUE(s->PutMetrics("sft-1", {{.step = 1, .attempt = 1, .loss = 3.0}}).ok());
  auto m = s->LoadMetrics("pref-1");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  const shard::StepMetrics& a = (*m)[0];
  EXPECT_EQ(a.pairs, 8);
  EXPECT_DOUBLE_EQ(a.rewards_chosen, 0.125);
  EXPECT_DOUBLE_EQ(a.rewards_rejected, -0.25);
  EXPECT_DOUBLE_EQ(a.rewards_accuracies, 0.875);
  EXPECT_DOUBLE_EQ(a.rewards_margins, 0.375);
  EXPECT_DOUBLE_EQ(a.logps_chosen, -12.5);
  EXPECT_DOUBLE_EQ(a.logps_rejected, -20.25);
  EXPECT_DOUBLE_EQ(a.nll, 1.5);
  EXPECT_TRUE(std::isnan((*m)[1].rewards_chosen)) << "a NaN must not come back as 0";
  EXPECT_DOUBLE_EQ((*m)[1].rewards_margins, 0.375);
  const shard::StepMetrics sft = s->LoadMetrics("sft-1")->front();
  EXPECT_EQ(sft.pairs, 0);
  EXPECT_EQ(sft.rewards_chosen, 0);
  EXPECT_EQ(sft.nll, 0);
}

// eval: on held-out pairs: the evaluated step keeps TRL's eval/ metrics;
// other steps read back with none.
TEST_F(StateStoreTest, PairEvaluationsKeepTheirEvalRewards) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  shard::StepMetrics plain{.step = 1, .attempt = 1, .loss = 0.6931, .lr = 1e-3, .grad_norm = 0.5, .tokens = 96};
  plain.pairs = 8;
  shard::StepMetrics evaluated = plain;
  evaluated.step = 2;
  evaluated.eval_samples = 4;
  evaluated.eval_loss = 0.625;
  evaluated.eval_pairs = 4;
  evaluated.eval_rewards_chosen = 0.0625;
  evaluated.eval_rewards_rejected = -0.125;
  evaluated.eval_rewards_accuracies = 0.75;
  evaluated.eval_rewards_margins = 0.1875;
  evaluated.eval_logps_chosen = -14.5;
  evaluated.eval_logps_rejected = -18.75;
  evaluated.eval_nll = 2.5;
  ASSERT_TRUE(s->PutMetrics("pref-e", {plain, evaluated}).ok());
  auto m = s->LoadMetrics("pref-e");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].eval_pairs, 0);
  EXPECT_EQ((*m)[0].eval_rewards_chosen, 0);
  const shard::StepMetrics& e = (*m)[1];
  EXPECT_EQ(e.eval_samples, 4);
  EXPECT_DOUBLE_EQ(e.eval_loss, 0.625);
  EXPECT_EQ(e.eval_pairs, 4);
  EXPECT_DOUBLE_EQ(e.eval_rewards_chosen, 0.0625);
  EXPECT_DOUBLE_EQ(e.eval_rewards_rejected, -0.125);
  EXPECT_DOUBLE_EQ(e.eval_rewards_accuracies, 0.75);
  EXPECT_DOUBLE_EQ(e.eval_rewards_margins, 0.1875);
  EXPECT_DOUBLE_EQ(e.eval_logps_chosen, -14.5);
  EXPECT_DOUBLE_EQ(e.eval_logps_rejected, -18.75);
  EXPECT_DOUBLE_EQ(e.eval_nll, 2.5);
}

TEST_F(StateStoreTest, EverythingSurvivesAReopen) {
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->AppendEvent({"tiny-7", 1, 10, 0, "submitted", "ok", 1}, Job("tiny-7")).ok());
    ASSERT_TRUE(s->PutWorker({"tiny-7", 2, 0, 4242, "h", "registered"}).ok());
    ASSERT_TRUE(s->PutCheckpoint({"tiny-7", 5, 1, 1, 10, "/p", 1}).ok());
    ASSERT_TRUE(s->PutMetrics("tiny-7", {shard::StepMetrics{.step = 5, .attempt = 2, .loss = 1.0, .lr = 0, .grad_norm = 0, .seconds = 0, .tokens = 0}}).ok());
  }
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto jobs = s->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  ExpectSameJob((*jobs)[0], Job("tiny-7"));
  EXPECT_EQ(*s->MaxJobNumber(), 7);
  EXPECT_EQ(s->LoadEvents("tiny-7", 0)->size(), 1u);
  ASSERT_EQ(s->LoadWorkers("tiny-7", 2)->size(), 1u);
  EXPECT_EQ(s->LoadWorkers("tiny-7", 2)->front().pid, 4242);
  EXPECT_EQ(s->LoadCheckpoints("tiny-7")->size(), 1u);
  EXPECT_EQ(s->LoadMetrics("tiny-7")->size(), 1u);
}

}  // namespace
}  // namespace shardd::testing
