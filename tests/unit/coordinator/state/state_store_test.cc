// The SQLite state store: every record kind round-trips (binary blobs
// included: specs are serialized protobuf), writes replace by key, an event
// and its job land together or not at all, everything survives a reopen,
// metric queries select by step, a preference: step keeps TRL's metrics (and
// eval/ metrics of an evaluation on held-out pairs), and
// a database from an older version opens with its rows and gains the columns
// added since.
#include "coordinator/state/state_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "coordinator/state/auth.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

class StateStoreTest : public ScratchTest {
 protected:
  std::unique_ptr<StateStore> Open() {
    auto s = StateStore::Open(Path("state"));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static JobRecord Job(const std::string& id, int state = 1) {
    JobRecord j;
    j.id = id;
    j.name = id.substr(0, id.rfind('-'));
    j.state = state;
    j.attempt = 2;
    j.restarts = 1;
    j.reason = "rank 1 killed by signal 9";
    j.spec = std::string("\x0a\x05yaml\0x", 8);  // protobuf bytes with a NUL
    j.progress = std::string("\x08\x07\0", 3);
    j.worker_token = HashToken("0123456789abcdef");  // what the JobManager stores
    j.created_ms = 1'700'000'000'123;
    j.updated_ms = 1'700'000'000'456;
    j.seq = 4;
    return j;
  }
};

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

void ExpectSameJob(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.restarts, b.restarts);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.progress, b.progress);
  EXPECT_EQ(a.worker_token, b.worker_token);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.updated_ms, b.updated_ms);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.stall, b.stall);
}

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

// Issue 18 item 10: garbage written into the middle of shardd.db used to open
// as an empty store (77 jobs gone, new ones numbered from 1). Now the open is
// refused with a message naming the file and the backup kept at the last good
// open, and that backup restores every job.
TEST_F(StateStoreTest, ACorruptDatabaseIsRefusedAndTheBackupRestoresIt) {
  const std::string db = Path("state/shardd.db");
  {
    auto s = Open();
    ASSERT_NE(s, nullptr);
    for (int i = 1; i <= 77; ++i) {
      JobRecord j = Job("tiny-" + std::to_string(i));
      j.spec = std::string(1500, static_cast<char>('a' + i % 26));  // many pages
      ASSERT_TRUE(s->PutJob(j).ok());
    }
  }
  { ASSERT_NE(Open(), nullptr) << "a sound database opens (and is backed up)"; }
  ASSERT_TRUE(fs::exists(db + ".bak"));
  const std::string good = ReadBytes(db);
  ASSERT_GT(good.size(), 16u * 4096) << "the jobs must span many pages";
  std::string bad = good;
  const size_t page = (good.size() / 4096 / 2) * 4096;  // a page in the middle
  for (size_t i = 0; i < 4096; ++i) bad[page + i] = static_cast<char>((i * 131 + 7) & 0xff);
  WriteBytes(db, bad);

  auto s = StateStore::Open(Path("state"));
  ASSERT_FALSE(s.ok()) << "a corrupt database was served";
  EXPECT_EQ(s.status().code(), shard::StatusCode::kFailedPrecondition) << s.status().ToString();
  const std::string msg = s.status().message();
  EXPECT_TRUE(Contains(msg, db + " is corrupt")) << msg;
  EXPECT_TRUE(Contains(msg, "cp " + db + ".bak " + db)) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_EQ(ReadBytes(db), bad) << "the refused file is left as it was";

  fs::copy_file(db + ".bak", db, fs::copy_options::overwrite_existing);
  auto restored = Open();
  ASSERT_NE(restored, nullptr);
  auto jobs = restored->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), 77u);
  EXPECT_EQ(*restored->MaxJobNumber(), 77);
}

TEST_F(StateStoreTest, ACorruptDatabaseWithoutBackupSaysSo) {
  { ASSERT_NE(Open(), nullptr); }
  fs::remove(Path("state/shardd.db.bak"));
  WriteBytes(Path("state/shardd.db"), std::string(8192, 'x'));  // not a database at all
  auto s = StateStore::Open(Path("state"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "no backup " + Path("state/shardd.db.bak"))) << s.status().ToString();
}

TEST_F(StateStoreTest, UnwritableStateDirIsAnErrorNamingIt) {
  WriteBytes(Path("file"), "x");
  auto s = StateStore::Open(Path("file/state"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), Path("file/state"))) << s.status().ToString();
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// The database held every attempt's worker token, world-readable (issue 18 #7).
TEST_F(StateStoreTest, StateDirAndDatabaseAreOwnerOnly) {
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->PutJob(Job("tiny-1")).ok());
  EXPECT_EQ(ModeOf(Path("state")), 0700u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db")), 0600u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db-wal")), 0600u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db-shm")), 0600u);
}

TEST_F(StateStoreTest, LooseModesFromAnOlderVersionAreRestrictedOnOpen) {
  { ASSERT_NE(Open(), nullptr); }
  ASSERT_EQ(::chmod(Path("state").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(Path("state/shardd.db").c_str(), 0644), 0);
  auto s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ModeOf(Path("state")), 0700u);
  EXPECT_EQ(ModeOf(Path("state/shardd.db")), 0600u);
}

TEST_F(StateStoreTest, APathThatIsNotADirectoryIsRefused) {
  WriteBytes(Path("plainfile"), "x");
  auto s = StateStore::Open(Path("plainfile"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status().message(), "is not a directory")) << s.status().ToString();
}

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
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
