// State databases written by older versions of shardd open with their rows
// and gain the columns added since (the loss scaler's, the preference
// metrics', the eval-pair metrics'), and the plain-text worker tokens they
// hold are hashed on open, the old bytes gone from the file and its WAL.
#include "coordinator/state/state_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>

#include "tests/unit/coordinator/state/older_database.h"
#include "tests/unit/coordinator/state/state_store_test_util.h"

namespace shardd::testing {
namespace {

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Opens the older database at state_dir twice (the second open finds the
// added columns already there): each time `check_old` sees old_job's one row;
// the first open stores `added` as new_job's one row and each open reads it
// back for `check_added`.
void OpenTwiceOneRowEach(const std::string& state_dir, const std::string& old_job,
                         const std::function<void(const shard::StepMetrics&)>& check_old,
                         const std::string& new_job, const shard::StepMetrics& added,
                         const std::function<void(const shard::StepMetrics&)>& check_added) {
  for (int open = 0; open < 2; ++open) {
    SCOPED_TRACE(open == 0 ? "first open" : "second open");
    auto s = StateStore::Open(state_dir);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto old = (*s)->LoadMetrics(old_job);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    ASSERT_EQ(old->size(), 1u);
    check_old(old->front());
    if (open == 0) ASSERT_TRUE((*s)->PutMetrics(new_job, {added}).ok());
    auto got = (*s)->LoadMetrics(new_job);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), 1u);
    check_added(got->front());
  }
}

// A state database written before jobs had join tokens and metrics had the
// loss scaler's columns: the tables as that version created them, and a row
// bound the way it bound them (text as blobs).
TEST_F(StateStoreTest, DatabaseFromBeforeTheLossScalerOpensKeepsItsRowsAndTakesNewOnes) {
  const char* rows = R"sql(
    INSERT INTO metrics VALUES(CAST('old-3' AS BLOB), 1, 1, 4.5, 1e-3, 0.9, 512, 0.25);
    INSERT INTO metrics VALUES(CAST('old-3' AS BLOB), 2, 1, 4.25, 1e-3, 0.8, 512, 0.25);
  )sql";
  ASSERT_NO_FATAL_FAILURE(RunSqlOnDatabase(
      Path("state"), std::string(kFirstReleaseOthers) + kFirstReleaseJobs + kFirstReleaseMetrics + rows));
  JobRecord job = Job("tiny-4");
  job.join_token = "feedface";
  job.stall = std::string("\x0a\x04rank\x00\x10\x02", 9);  // a blob, with a NUL inside
  for (int open = 0; open < 2; ++open) {  // the second open finds the columns already there
    auto s = Open();
    ASSERT_NE(s, nullptr);
    auto old = s->LoadMetrics("old-3");
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    ASSERT_GE(old->size(), 2u);
    EXPECT_DOUBLE_EQ((*old)[0].loss, 4.5);
    EXPECT_EQ((*old)[1].tokens, 512);
    EXPECT_FALSE((*old)[0].skipped);
    EXPECT_EQ((*old)[0].loss_scale, 0) << "an old row's scale is 'not reported'";
    EXPECT_EQ((*old)[0].eval_samples, 0) << "an old row has no evaluation";
    EXPECT_EQ((*old)[0].eval_exact_match, -1);
    if (open == 0) {
      ASSERT_TRUE(s->PutMetrics("old-3", {{.step = 3, .attempt = 2, .loss = 4.0, .skipped = true, .loss_scale = 1024}})
                      .ok());
      ASSERT_TRUE(s->PutJob(job).ok());
    }
    ASSERT_EQ(s->LoadMetrics("old-3")->size(), 3u);
    const shard::StepMetrics added = s->LoadMetrics("old-3", {.after_step = 2})->front();
    EXPECT_EQ(added.attempt, 2);
    EXPECT_TRUE(added.skipped);
    EXPECT_DOUBLE_EQ(added.loss_scale, 1024);
    auto jobs = s->LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 1u);
    ExpectSameJob((*jobs)[0], job);
    EXPECT_EQ((*jobs)[0].join_token, "feedface");
    EXPECT_EQ((*jobs)[0].stall, job.stall) << "the stall column, added to an older database";
  }
}

// A state database as the version before the preference columns created it
// (eval columns, no pairs/rewards/logps/nll): the new daemon opens it, reads
// its rows as SFT steps, and stores a preference step in it.
TEST_F(StateStoreTest, DatabaseFromBeforeThePreferenceColumnsOpensAndTakesPreferenceSteps) {
  const char* old_schema = R"sql(
    CREATE TABLE metrics(
      job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL,
      grad_norm REAL, tokens INTEGER, seconds REAL, skipped INTEGER NOT NULL DEFAULT 0,
      loss_scale REAL NOT NULL DEFAULT 0, eval_samples INTEGER NOT NULL DEFAULT 0, eval_loss REAL,
      eval_exact_match REAL NOT NULL DEFAULT -1, PRIMARY KEY(job_id, step));
    INSERT INTO metrics(job_id,step,attempt,loss,lr,grad_norm,tokens,seconds,loss_scale,eval_samples,eval_loss,
                        eval_exact_match) VALUES(CAST('sft-2' AS BLOB), 1, 1, 4.5, 1e-3, 0.9, 512, 0.25, 1, 16, 4.0, 0.5);
  )sql";
  ASSERT_NO_FATAL_FAILURE(
      RunSqlOnDatabase(Path("state"), std::string(kFirstReleaseJobs) + kFirstReleaseOthers + old_schema));
  shard::StepMetrics dpo{.step = 1, .attempt = 1, .loss = 0.5};
  dpo.pairs = 4;
  dpo.rewards_accuracies = 0.75;
  dpo.logps_chosen = -9.5;
  OpenTwiceOneRowEach(
      Path("state"), "sft-2",
      [](const shard::StepMetrics& old) {
        EXPECT_DOUBLE_EQ(old.loss, 4.5);
        EXPECT_EQ(old.eval_samples, 16);
        EXPECT_DOUBLE_EQ(old.eval_exact_match, 0.5);
        EXPECT_EQ(old.pairs, 0) << "an old row is not a preference step";
        EXPECT_EQ(old.rewards_accuracies, 0);
      },
      "pref-2", dpo,
      [](const shard::StepMetrics& pref) {
        EXPECT_EQ(pref.pairs, 4);
        EXPECT_DOUBLE_EQ(pref.rewards_accuracies, 0.75);
        EXPECT_DOUBLE_EQ(pref.logps_chosen, -9.5);
      });
}

// A state database as the version before the eval-pair columns created it
// (the preference columns, no eval_pairs/eval_rewards_*): the new daemon opens
// it, reads its rows as steps without a pair evaluation, and stores one.
TEST_F(StateStoreTest, DatabaseFromBeforeTheEvalPairColumnsOpensAndTakesPairEvaluations) {
  const char* old_schema = R"sql(
    CREATE TABLE metrics(
      job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL,
      grad_norm REAL, tokens INTEGER, seconds REAL, skipped INTEGER NOT NULL DEFAULT 0,
      loss_scale REAL NOT NULL DEFAULT 0, eval_samples INTEGER NOT NULL DEFAULT 0, eval_loss REAL,
      eval_exact_match REAL NOT NULL DEFAULT -1, pairs INTEGER NOT NULL DEFAULT 0, rewards_chosen REAL,
      rewards_rejected REAL, rewards_accuracies REAL, rewards_margins REAL, logps_chosen REAL, logps_rejected REAL,
      nll REAL, PRIMARY KEY(job_id, step));
    INSERT INTO metrics(job_id,step,attempt,loss,lr,grad_norm,tokens,seconds,loss_scale,eval_samples,eval_loss,
                        eval_exact_match,pairs,rewards_accuracies)
      VALUES(CAST('pref-3' AS BLOB), 1, 1, 0.69, 1e-3, 0.9, 512, 0.25, 1, 4, 0.7, -1, 8, 0.5);
  )sql";
  ASSERT_NO_FATAL_FAILURE(
      RunSqlOnDatabase(Path("state"), std::string(kFirstReleaseJobs) + kFirstReleaseOthers + old_schema));
  shard::StepMetrics dpo{.step = 1, .attempt = 1, .loss = 0.5};
  dpo.pairs = 4;
  dpo.eval_samples = dpo.eval_pairs = 2;
  dpo.eval_rewards_accuracies = 1;
  dpo.eval_logps_rejected = -7.25;
  OpenTwiceOneRowEach(
      Path("state"), "pref-3",
      [](const shard::StepMetrics& old) {
        EXPECT_EQ(old.pairs, 8);
        EXPECT_DOUBLE_EQ(old.rewards_accuracies, 0.5);
        EXPECT_EQ(old.eval_samples, 4);
        EXPECT_EQ(old.eval_pairs, 0) << "an old row has no eval/ figures";
        EXPECT_EQ(old.eval_rewards_accuracies, 0);
      },
      "pref-4", dpo,
      [](const shard::StepMetrics& pref) {
        EXPECT_EQ(pref.eval_pairs, 2);
        EXPECT_DOUBLE_EQ(pref.eval_rewards_accuracies, 1);
        EXPECT_DOUBLE_EQ(pref.eval_logps_rejected, -7.25);
      });
}

// Databases written by older versions hold plain-text tokens: hashed on open,
// and the old bytes are gone from the file and its WAL.
TEST_F(StateStoreTest, PlaintextTokensFromAnOlderVersionAreHashedOnOpen) {
  const std::string plain = "6f1d2c3b4a5968778695a4b3c2d1e0f11223344556677889";
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    JobRecord old = Job("tiny-3");
    old.worker_token = plain;
    ASSERT_TRUE(s->PutJob(old).ok());
    ASSERT_TRUE(s->PutJob(Job("tiny-4")).ok());  // already a hash: left alone
  }
  ASSERT_NE(FileBytes(Path("state/shardd.db")) + FileBytes(Path("state/shardd.db-wal")), "");
  auto s = Open();
  ASSERT_NE(s, nullptr);
  auto jobs = s->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].worker_token, HashToken(plain));
  EXPECT_EQ((*jobs)[1].worker_token, HashToken("0123456789abcdef"));
  const std::string bytes = FileBytes(Path("state/shardd.db")) + FileBytes(Path("state/shardd.db-wal"));
  EXPECT_EQ(bytes.find(plain), std::string::npos) << "the plain-text token is still on disk";
}

}  // namespace
}  // namespace shardd::testing
