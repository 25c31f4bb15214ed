// A state database written by the shardd before the step-metric table
// (schema version 1: one column per preference figure, written positionally)
// opens with this one and reads the same figures. The SQL below is that
// shardd's own output (.dump of a store it wrote with PutMetrics): a DPO step
// with an evaluation on held-out pairs, a skipped step with a NaN figure, and
// an SFT step.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "coordinator/state/state_schema.h"
#include "coordinator/state/state_store.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVersion1Db = R"sql(
CREATE TABLE jobs(id TEXT PRIMARY KEY, name TEXT NOT NULL, state INTEGER NOT NULL, attempt INTEGER NOT NULL, restarts INTEGER NOT NULL, reason TEXT NOT NULL, spec BLOB NOT NULL, progress BLOB NOT NULL, worker_token TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, seq INTEGER NOT NULL, number INTEGER NOT NULL, join_token TEXT NOT NULL DEFAULT '', stall BLOB NOT NULL DEFAULT '', memory_dir TEXT NOT NULL DEFAULT '', memory_tier_removed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE workers(job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL, pid INTEGER NOT NULL, hostname TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY(job_id, attempt, rank));
CREATE TABLE events(job_id TEXT NOT NULL, seq INTEGER NOT NULL, unix_ms INTEGER NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL, state INTEGER NOT NULL, PRIMARY KEY(job_id, seq));
CREATE TABLE checkpoints(job_id TEXT NOT NULL, step INTEGER NOT NULL, world INTEGER NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL, path TEXT NOT NULL, committed_ms INTEGER NOT NULL, tier TEXT NOT NULL DEFAULT 'disk', PRIMARY KEY(job_id, step));
CREATE TABLE metrics(job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL, grad_norm REAL, tokens INTEGER, seconds REAL, skipped INTEGER NOT NULL DEFAULT 0, loss_scale REAL NOT NULL DEFAULT 0, eval_samples INTEGER NOT NULL DEFAULT 0, eval_loss REAL, eval_exact_match REAL NOT NULL DEFAULT -1, pairs INTEGER NOT NULL DEFAULT 0, rewards_chosen REAL, rewards_rejected REAL, rewards_accuracies REAL, rewards_margins REAL, logps_chosen REAL, logps_rejected REAL, nll REAL, eval_pairs INTEGER NOT NULL DEFAULT 0, eval_rewards_chosen REAL, eval_rewards_rejected REAL, eval_rewards_accuracies REAL, eval_rewards_margins REAL, eval_logps_chosen REAL, eval_logps_rejected REAL, eval_nll REAL, PRIMARY KEY(job_id, step));
INSERT INTO metrics VALUES(X'6f6c642d31',1,1,0.6899999999999999467,0.00010000000000000000479,0.5,256,0.25,0,1.0,4,0.625,-1.0,8,0.125,-0.25,0.875,0.375,-12.5,-20.25,1.5,4,0.0625,-0.125,0.75,0.1875,-11.0,-19.0,2.5);
INSERT INTO metrics VALUES(X'6f6c642d31',2,1,NULL,0.0,0.0,0,0.0,1,512.0,0,0.0,-1.0,8,NULL,0.0,0.5,0.0,0.0,0.0,0.0,0,0.0,0.0,0.0,0.0,0.0,0.0,0.0);
INSERT INTO metrics VALUES(X'6f6c642d31',3,2,2.5,0.0,0.0,100,1.0,0,1.0,0,0.0,-1.0,0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0,0.0,0.0,0.0,0.0,0.0,0.0,0.0);
CREATE TABLE job_resources(job_id TEXT PRIMARY KEY, demand TEXT NOT NULL, placement TEXT NOT NULL);
PRAGMA user_version = 1;
)sql";

class MetricsMigrationTest : public ScratchTest {};

TEST_F(MetricsMigrationTest, AVersion1DatabaseReadsTheSameFigures) {
  fs::create_directories(Path("state"));
  fs::permissions(Path("state"), fs::perms::owner_all);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, kVersion1Db, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);

  auto s = StateStore::Open(Path("state"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto rows = (*s)->LoadMetrics("old-1", {});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  const shard::StepMetrics& a = (*rows)[0];
  EXPECT_DOUBLE_EQ(a.loss, 0.69);
  EXPECT_EQ(a.pairs, 8);
  EXPECT_DOUBLE_EQ(a.rewards_chosen, 0.125);
  EXPECT_DOUBLE_EQ(a.rewards_rejected, -0.25);
  EXPECT_DOUBLE_EQ(a.rewards_accuracies, 0.875);
  EXPECT_DOUBLE_EQ(a.rewards_margins, 0.375);
  EXPECT_DOUBLE_EQ(a.logps_chosen, -12.5);
  EXPECT_DOUBLE_EQ(a.logps_rejected, -20.25);
  EXPECT_DOUBLE_EQ(a.nll, 1.5);
  EXPECT_EQ(a.eval_pairs, 4);
  EXPECT_DOUBLE_EQ(a.eval_loss, 0.625);
  EXPECT_DOUBLE_EQ(a.eval_rewards_chosen, 0.0625);
  EXPECT_DOUBLE_EQ(a.eval_rewards_rejected, -0.125);
  EXPECT_DOUBLE_EQ(a.eval_rewards_accuracies, 0.75);
  EXPECT_DOUBLE_EQ(a.eval_rewards_margins, 0.1875);
  EXPECT_DOUBLE_EQ(a.eval_logps_chosen, -11);
  EXPECT_DOUBLE_EQ(a.eval_logps_rejected, -19);
  EXPECT_DOUBLE_EQ(a.eval_nll, 2.5);
  EXPECT_EQ(a.moe_layers, 0) << "a row from before the MoE figures is dense";
  EXPECT_TRUE(a.expert_load.empty());
  const shard::StepMetrics& b = (*rows)[1];
  EXPECT_TRUE(b.skipped);
  EXPECT_TRUE(std::isnan(b.loss));
  EXPECT_TRUE(std::isnan(b.rewards_chosen)) << "a NaN figure of a skipped step stays NaN";
  EXPECT_DOUBLE_EQ(b.rewards_accuracies, 0.5);
  const shard::StepMetrics& c = (*rows)[2];
  EXPECT_EQ(c.attempt, 2);
  EXPECT_EQ(c.pairs, 0);
  EXPECT_DOUBLE_EQ(c.rewards_chosen, 0);

  // It is now this version's database: a new step with every kind of figure goes in and out.
  shard::StepMetrics moe;
  moe.step = 4;
  moe.attempt = 2;
  moe.moe_experts = 4;
  moe.expert_load = {0.5, 0.25, 0.125, 0.125};
  moe.moe_layers = 1;
  moe.moe_aux_loss = 1.25;
  ASSERT_TRUE((*s)->PutMetrics("old-1", {moe}).ok());
  auto more = (*s)->LoadMetrics("old-1", {.after_step = 3});
  ASSERT_TRUE(more.ok() && more->size() == 1u);
  EXPECT_EQ((*more)[0].expert_load, moe.expert_load);
  EXPECT_DOUBLE_EQ((*more)[0].moe_aux_loss, 1.25);
  s->reset();
  sqlite3* check = nullptr;
  ASSERT_EQ(sqlite3_open((Path("state") + "/shardd.db").c_str(), &check), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(check, "PRAGMA user_version", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), state_schema::Version());
  sqlite3_finalize(st);
  sqlite3_close(check);
}

}  // namespace
}  // namespace shardd::testing
