// A write of a job's record that the state store refuses is a job-level
// error, never only a log line (issue 39): a checkpoint commit that cannot be
// recorded fails the job (and the reporting rank hears why) instead of
// letting it end SUCCEEDED; an event that cannot be stored fails the job at
// the next Tick. The store is broken under the running owners (job_owners_test_util.h) by a second
// SQLite connection, as a careless operator (or a full disk) would.
#include <gtest/gtest.h>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"
#include "tests/unit/coordinator/state/older_database.h"

namespace shardd::testing {
namespace {

using shard::StatusCode;

class StoreFailureTest : public JobOwnersTest {
 protected:
  void BreakStore(const std::string& sql) { RunSqlOnDatabase(Path("state"), sql); }
};

// Regression: every commit failed to be recorded (a log line each) and the
// job still SUCCEEDED.
TEST_F(StoreFailureTest, ACommitTheStoreCannotRecordFailsTheJobInsteadOfSucceeding) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  BreakStore("DROP TABLE checkpoints");
  auto r = ReportTwoRankStep(id, 20, token);
  ASSERT_FALSE(r.ok()) << "the rank was told its commit is recorded";
  EXPECT_TRUE(Contains(r.status().message(), "could not record the commit of step 20")) << r.status().ToString();
  // The ranks finish before the next Tick: done must not read as success.
  ASSERT_TRUE(ReportDone(id, 1, 0, token).ok());
  ASSERT_TRUE(ReportDone(id, 1, 1, token).ok());
  EXPECT_EQ(State(id), v1::FAILED) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "the state store could not record the commit of step 20")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "no such table: checkpoints")) << Reason(id);
}

TEST_F(StoreFailureTest, AnEventTheStoreCannotRecordFailsTheJob) {
  const std::string id = StartRunningJob();
  const std::string token = TokenOf(id, 1);
  BreakStore("DROP TABLE events");
  ASSERT_TRUE(ReportTwoRankStep(id, 20, token).ok());  // the commit is stored; its event is not
  EXPECT_EQ(State(id), v1::RUNNING);
  owners_->loop.Tick();
  EXPECT_EQ(State(id), v1::FAILED) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "could not record event checkpoint_committed")) << Reason(id);
  EXPECT_TRUE(Contains(Reason(id), "(not retryable)")) << "a restart would meet the same store: " << Reason(id);
}

}  // namespace
}  // namespace shardd::testing
