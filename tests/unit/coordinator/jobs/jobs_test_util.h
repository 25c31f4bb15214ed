// Helpers of the coordinator/jobs/ seam tests: the parts the JobManager facade
// builds (job table, scheduler, runner, attempt lifecycle, rendezvous store),
// wired the same way over a real StateStore in a scratch dir, a fake clock and
// the fake launcher of coordinator_test_util.h — and jobs put straight into the
// table, so each class is driven alone, without the facade or a Tick.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "coordinator/state/auth.h"
#include "coordinator/jobs/attempt_lifecycle.h"
#include "coordinator/jobs/attempt_runner.h"
#include "coordinator/jobs/job_scheduler.h"
#include "coordinator/jobs/job_table.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {

class JobPartsTest : public ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    if (HasFatalFailure()) return;
    auto s = StateStore::Open(Path("state"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    opts_.state_dir = Path("state");
    opts_.coordinator_address = "127.0.0.1:7000";
    opts_.worker_bin = "/opt/shardd/bin/shardd-worker";
    opts_.kill_grace_s = 5;
    opts_.stall_forgive_s = 0;
    opts_.now_ms = [this] { return now_ms_; };
    Build();
  }
  // (Re)builds the parts over opts_ (a test changes opts_ first).
  void Build() {
    attempts_.reset();
    runner_.reset();
    sched_.reset();
    table_ = std::make_unique<JobTable>(opts_, store_.get());
    sched_ = std::make_unique<JobScheduler>(opts_, table_.get());
    table_->set_allocator(sched_->allocator());
    runner_ = std::make_unique<AttemptRunner>(table_.get());
    runner_->AddLauncher(&launcher_);
    attempts_ = std::make_unique<AttemptLifecycle>(opts_, table_.get(), runner_.get(), sched_.get(), &rendezvous_);
  }

  // A parsed job of `world` CPU ranks in `state`, not yet launched, put in the
  // table (with the lock taken and let go here).
  Job& AddJob(const std::string& name = "tiny", int world = 2, const std::string& extra = "") {
    const std::string yaml = "name: " + name +
                             "\nmodel: {preset: tiny}\n"
                             "data: {tokens: data/tokens.u32, seq_len: 16}\n"
                             "train: {steps: 100, global_batch: " + std::to_string(2 * world) +
                             ", micro_batch: 2}\n"
                             "parallel: {world_size: " + std::to_string(world) + "}\n"
                             "checkpoint: {dir: ckpt, every_steps: 5, keep_last: 2}\n"
                             "resources: {device: cpu}\n"
                             "restart: {max_restarts: 2, backoff_s: 3, heartbeat_timeout_s: 10, hang_timeout_s: 60}\n" + extra;
    auto config = shard::ParseJobConfig(yaml, "jobs/" + name + ".yaml", {});
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    auto j = std::make_unique<Job>();
    j->name = name;
    j->spec.set_yaml(yaml);
    j->spec.set_workdir(Path("work"));
    j->config = *config;
    j->created_ms = now_ms_;
    j->ckpt.Init(j->config.checkpoint.keep_last, j->config.checkpoint.memory.keep_last);
    j->launcher = IsExternal(*j) ? nullptr : &launcher_;
    auto lock = table_->Lock();
    j->id = table_->NewJobId(name);
    return table_->Insert(std::move(j));
  }
  // Begins the job's next attempt (as a Tick would) and returns its launch request.
  LaunchRequest Begin(Job& j, const std::string& resume = "") {
    LaunchRequest req;
    auto lock = table_->Lock();
    EXPECT_TRUE(attempts_->Begin(j, resume, &req));
    return req;
  }
  std::vector<EventRecord> Events(const std::string& id) {
    auto ev = store_->LoadEvents(id, 0);
    EXPECT_TRUE(ev.ok()) << ev.status().ToString();
    return ev.ok() ? *ev : std::vector<EventRecord>{};
  }
  static v1::WorkerId Worker(const std::string& id, int attempt, int rank) {
    v1::WorkerId w;
    w.set_job_id(id);
    w.set_attempt(attempt);
    w.set_rank(rank);
    return w;
  }

  int64_t now_ms_ = 1'700'000'000'000;
  JobManagerOptions opts_;
  FakeLauncher launcher_;
  RendezvousStore rendezvous_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<JobTable> table_;
  std::unique_ptr<JobScheduler> sched_;
  std::unique_ptr<AttemptRunner> runner_;
  std::unique_ptr<AttemptLifecycle> attempts_;
};

}  // namespace shardd::testing
