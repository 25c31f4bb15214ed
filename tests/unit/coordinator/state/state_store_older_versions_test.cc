// State databases written by older versions of shardd open with their rows
// and gain the columns added since (the loss scaler's, the preference
// metrics', the eval-pair metrics'), and the plain-text worker tokens they
// hold are hashed on open, the old bytes gone from the file and its WAL.
#include "coordinator/state/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "tests/unit/coordinator/state/state_store_test_util.h"

namespace shardd::testing {
namespace {

// The tables of the first release other than metrics, as an older shardd
// created them: a database from an older version always has them (a missing
// one is refused, state_schema_test.cc). kFirstReleaseJobs is that jobs table.
constexpr const char* kFirstReleaseJobs = R"sql(
  CREATE TABLE jobs(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, state INTEGER NOT NULL, attempt INTEGER NOT NULL,
    restarts INTEGER NOT NULL, reason TEXT NOT NULL, spec BLOB NOT NULL, progress BLOB NOT NULL,
    worker_token TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL, number INTEGER NOT NULL);
)sql";
constexpr const char* kFirstReleaseOthers = R"sql(
  CREATE TABLE workers(
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL, pid INTEGER NOT NULL,
    hostname TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY(job_id, attempt, rank));
  CREATE TABLE events(
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, unix_ms INTEGER NOT NULL, attempt INTEGER NOT NULL,
    kind TEXT NOT NULL, message TEXT NOT NULL, state INTEGER NOT NULL, PRIMARY KEY(job_id, seq));
  CREATE TABLE checkpoints(
    job_id TEXT NOT NULL, step INTEGER NOT NULL, world INTEGER NOT NULL, files INTEGER NOT NULL,
    bytes INTEGER NOT NULL, path TEXT NOT NULL, committed_ms INTEGER NOT NULL, PRIMARY KEY(job_id, step));
)sql";

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A state database written before jobs had join tokens and metrics had the
// loss scaler's columns: the tables as that version created them, and a row
// bound the way it bound them (text as blobs).
TEST_F(StateStoreTest, DatabaseFromBeforeTheLossScalerOpensKeepsItsRowsAndTakesNewOnes) {
  fs::create_directories(Path("state"));
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &db), SQLITE_OK);
    const char* old_schema = R"sql(
      CREATE TABLE jobs(
        id TEXT PRIMARY KEY, name TEXT NOT NULL, state INTEGER NOT NULL, attempt INTEGER NOT NULL,
        restarts INTEGER NOT NULL, reason TEXT NOT NULL, spec BLOB NOT NULL, progress BLOB NOT NULL,
        worker_token TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
        seq INTEGER NOT NULL, number INTEGER NOT NULL);
      CREATE TABLE metrics(
        job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL,
        grad_norm REAL, tokens INTEGER, seconds REAL, PRIMARY KEY(job_id, step));
      INSERT INTO metrics VALUES(CAST('old-3' AS BLOB), 1, 1, 4.5, 1e-3, 0.9, 512, 0.25);
      INSERT INTO metrics VALUES(CAST('old-3' AS BLOB), 2, 1, 4.25, 1e-3, 0.8, 512, 0.25);
    )sql";
    const std::string sql = std::string(kFirstReleaseOthers) + old_schema;
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_close(db);
  }
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
  fs::create_directories(Path("state"));
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &db), SQLITE_OK);
    const char* old_schema = R"sql(
      CREATE TABLE metrics(
        job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL,
        grad_norm REAL, tokens INTEGER, seconds REAL, skipped INTEGER NOT NULL DEFAULT 0,
        loss_scale REAL NOT NULL DEFAULT 0, eval_samples INTEGER NOT NULL DEFAULT 0, eval_loss REAL,
        eval_exact_match REAL NOT NULL DEFAULT -1, PRIMARY KEY(job_id, step));
      INSERT INTO metrics(job_id,step,attempt,loss,lr,grad_norm,tokens,seconds,loss_scale,eval_samples,eval_loss,
                          eval_exact_match) VALUES(CAST('sft-2' AS BLOB), 1, 1, 4.5, 1e-3, 0.9, 512, 0.25, 1, 16, 4.0, 0.5);
    )sql";
    const std::string sql = std::string(kFirstReleaseJobs) + kFirstReleaseOthers + old_schema;
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_close(db);
  }
  for (int open = 0; open < 2; ++open) {  // the second open finds the columns already there
    auto s = Open();
    ASSERT_NE(s, nullptr);
    auto old = s->LoadMetrics("sft-2");
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    ASSERT_EQ(old->size(), 1u);
    EXPECT_DOUBLE_EQ((*old)[0].loss, 4.5);
    EXPECT_EQ((*old)[0].eval_samples, 16);
    EXPECT_DOUBLE_EQ((*old)[0].eval_exact_match, 0.5);
    EXPECT_EQ((*old)[0].pairs, 0) << "an old row is not a preference step";
    EXPECT_EQ((*old)[0].rewards_accuracies, 0);
    if (open == 0) {
      shard::StepMetrics dpo{.step = 1, .attempt = 1, .loss = 0.5};
      dpo.pairs = 4;
      dpo.rewards_accuracies = 0.75;
      dpo.logps_chosen = -9.5;
      ASSERT_TRUE(s->PutMetrics("pref-2", {dpo}).ok());
    }
    auto pref = s->LoadMetrics("pref-2");
    ASSERT_TRUE(pref.ok()) << pref.status().ToString();
    ASSERT_EQ(pref->size(), 1u);
    EXPECT_EQ((*pref)[0].pairs, 4);
    EXPECT_DOUBLE_EQ((*pref)[0].rewards_accuracies, 0.75);
    EXPECT_DOUBLE_EQ((*pref)[0].logps_chosen, -9.5);
  }
}

// A state database as the version before the eval-pair columns created it
// (the preference columns, no eval_pairs/eval_rewards_*): the new daemon opens
// it, reads its rows as steps without a pair evaluation, and stores one.
TEST_F(StateStoreTest, DatabaseFromBeforeTheEvalPairColumnsOpensAndTakesPairEvaluations) {
  fs::create_directories(Path("state"));
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &db), SQLITE_OK);
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
    const std::string sql = std::string(kFirstReleaseJobs) + kFirstReleaseOthers + old_schema;
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_close(db);
  }
  for (int open = 0; open < 2; ++open) {  // the second open finds the columns already there
    auto s = Open();
    ASSERT_NE(s, nullptr);
    auto old = s->LoadMetrics("pref-3");
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    ASSERT_EQ(old->size(), 1u);
    EXPECT_EQ((*old)[0].pairs, 8);
    EXPECT_DOUBLE_EQ((*old)[0].rewards_accuracies, 0.5);
    EXPECT_EQ((*old)[0].eval_samples, 4);
    EXPECT_EQ((*old)[0].eval_pairs, 0) << "an old row has no eval/ figures";
    EXPECT_EQ((*old)[0].eval_rewards_accuracies, 0);
    if (open == 0) {
      shard::StepMetrics dpo{.step = 1, .attempt = 1, .loss = 0.5};
      dpo.pairs = 4;
      dpo.eval_samples = dpo.eval_pairs = 2;
      dpo.eval_rewards_accuracies = 1;
      dpo.eval_logps_rejected = -7.25;
      ASSERT_TRUE(s->PutMetrics("pref-4", {dpo}).ok());
    }
    auto pref = s->LoadMetrics("pref-4");
    ASSERT_TRUE(pref.ok()) << pref.status().ToString();
    ASSERT_EQ(pref->size(), 1u);
    EXPECT_EQ((*pref)[0].eval_pairs, 2);
    EXPECT_DOUBLE_EQ((*pref)[0].eval_rewards_accuracies, 1);
    EXPECT_DOUBLE_EQ((*pref)[0].eval_logps_rejected, -7.25);
  }
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
