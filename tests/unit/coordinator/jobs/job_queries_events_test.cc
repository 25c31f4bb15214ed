// JobQueries' events and logs, over the owners of job_owners_test_util.h: Watch
// returns past events in order and sends live ones; Logs reads the attempt's
// rank log, and never through a symlink (or a folder on the way), nor opens a
// FIFO.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>

#include "tests/unit/coordinator/jobs/job_owners_test_util.h"

namespace shardd::testing {
namespace {

class JobQueriesEventsTest : public JobOwnersTest {};

using shard::StatusCode;

TEST_F(JobQueriesEventsTest, WatchReturnsPastEventsInOrderAndSendsLiveOnes) {
  const std::string id = StartRunningJob();
  std::vector<v1::JobEvent> past;
  std::vector<v1::JobEvent> live;
  auto watch = owners_->queries.Watch(id, 0, [&](const v1::JobEvent& e) { live.push_back(e); }, &past);
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_EQ(past.size(), 3u);
  EXPECT_EQ(past[0].kind(), "submitted");
  EXPECT_EQ(past[0].state(), v1::QUEUED);
  EXPECT_EQ(past[1].kind(), "launching");
  EXPECT_EQ(past[1].state(), v1::LAUNCHING);
  EXPECT_EQ(past[2].kind(), "running");
  EXPECT_EQ(past[2].state(), v1::RUNNING);
  for (size_t i = 0; i < past.size(); ++i) {
    EXPECT_EQ(past[i].seq(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(past[i].job_id(), id);
  }
  EXPECT_EQ(past[1].attempt(), 1);
  EXPECT_TRUE(live.empty());

  // A live state change, and a progress update (live only, no seq).
  v1::StepMetric m;
  m.set_step(7);
  m.set_seconds(0.5);
  m.set_tokens(64);
  m.set_loss(3.5);
  ASSERT_TRUE(Heartbeat(id, 1, 0, 7, TokenOf(id, 1), {m}).ok());
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].kind(), "progress");
  EXPECT_EQ(live[0].progress().step(), 7);
  EXPECT_DOUBLE_EQ(live[0].progress().loss(), 3.5);

  launcher_.Exit(id, 1, 0, 0, SIGKILL);
  owners_->loop.Tick();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[1].kind(), "restarting");
  EXPECT_EQ(live[1].seq(), 4);
  EXPECT_EQ(live[1].state(), v1::RESTARTING);

  // Resuming after seq 2 skips what was seen; Unwatch stops delivery.
  std::vector<v1::JobEvent> tail;
  auto w2 = owners_->queries.Watch(id, 2, [](const v1::JobEvent&) {}, &tail);
  ASSERT_TRUE(w2.ok());
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].seq(), 3);
  EXPECT_EQ(tail[1].seq(), 4);
  EXPECT_EQ(tail.back().progress().step(), 7) << "the newest event carries the current progress";
  owners_->queries.Unwatch(*watch);
  owners_->queries.Unwatch(*w2);
  ASSERT_TRUE(owners_->submission.Cancel(id, "").ok());
  EXPECT_EQ(live.size(), 2u);

  // Stored metrics: the heartbeat's step.
  auto metrics = store_->LoadMetrics(id);
  ASSERT_TRUE(metrics.ok());
  ASSERT_EQ(metrics->size(), 1u);
  EXPECT_EQ((*metrics)[0].step, 7);
  EXPECT_EQ(owners_->queries.Watch("nope-1", 0, nullptr, &tail).status().code(), StatusCode::kNotFound);
}

TEST_F(JobQueriesEventsTest, LogsReadTheAttemptsRankLog) {
  const std::string id = SubmitJob();
  EXPECT_EQ(owners_->queries.Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kFailedPrecondition);
  owners_->loop.Tick();
  WriteBytes(Path("state") + "/jobs/" + id + "/attempt_1/rank_1.log", "hello from rank 1\n");
  auto chunk = owners_->queries.Logs(id, 1, 0, 6, 4);
  ASSERT_TRUE(chunk.ok()) << chunk.status().ToString();
  EXPECT_EQ(chunk->data, "from");
  EXPECT_EQ(chunk->next_offset, 10);
  EXPECT_EQ(chunk->attempt, 1);
  EXPECT_FALSE(chunk->finished);
  auto tail = owners_->queries.Logs(id, 1, 0, -1, 8);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->data, " rank 1\n");
  EXPECT_EQ(owners_->queries.Logs(id, 2, 0, 0, 0).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(owners_->queries.Logs(id, 0, 2, 0, 0).status().code(), StatusCode::kOutOfRange);
}

// The job's processes can write in its log folder: a log swapped for a
// symlink (or a folder on the way) is refused, never followed, and a FIFO is
// not opened for reading (it would block the RPC).
TEST_F(JobQueriesEventsTest, LogsAreNeverServedThroughASymlink) {
  const std::string id = SubmitJob();
  owners_->loop.Tick();
  const std::string attempt_dir = Path("state") + "/jobs/" + id + "/attempt_1";
  WriteBytes(Path("secret"), "root:hash:...\n");
  WriteBytes(attempt_dir + "/rank_0.log", "plain log\n");
  fs::create_symlink(Path("secret"), attempt_dir + "/rank_1.log");
  auto chunk = owners_->queries.Logs(id, 1, 0, 0, 0);
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Contains(chunk.status().message(), "rank_1.log is a symbolic link")) << chunk.status().ToString();
  EXPECT_FALSE(Contains(chunk.status().message(), "root:hash"));
  auto plain = owners_->queries.Logs(id, 0, 0, 0, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->data, "plain log\n");
  // A Kubernetes pod's rank log is a link to the pod's log beside it: served.
  WriteBytes(attempt_dir + "/pod_0.log", "from the pod\n");
  fs::remove(attempt_dir + "/rank_0.log");
  fs::create_symlink("pod_0.log", attempt_dir + "/rank_0.log");
  auto pod = owners_->queries.Logs(id, 0, 0, 0, 0);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->data, "from the pod\n");
  // ... but not a pod log link that leads elsewhere.
  fs::remove(attempt_dir + "/rank_0.log");
  fs::create_symlink("../../../../secret", attempt_dir + "/rank_0.log");
  EXPECT_EQ(owners_->queries.Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kPermissionDenied);

  // The attempt's folder itself swapped for a symlink to a folder of logs.
  WriteBytes(Path("elsewhere/rank_0.log"), "not this job's\n");
  WriteBytes(Path("elsewhere/pod_0.log"), "not this job's\n");
  fs::rename(attempt_dir, attempt_dir + ".old");
  fs::create_symlink(Path("elsewhere"), attempt_dir);
  auto through_dir = owners_->queries.Logs(id, 0, 0, 0, 0);
  ASSERT_FALSE(through_dir.ok());
  EXPECT_EQ(through_dir.status().code(), StatusCode::kPermissionDenied);

  fs::remove(attempt_dir);
  fs::create_directories(attempt_dir);
  ASSERT_EQ(::mkfifo((attempt_dir + "/rank_0.log").c_str(), 0600), 0);
  EXPECT_EQ(owners_->queries.Logs(id, 0, 0, 0, 0).status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace shardd::testing
