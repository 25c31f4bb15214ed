// The coordinator's half of the memory checkpoint tier (checkpoint.memory),
// over the parts and the fake launcher: Register hands the ranks the tier's
// folder; a memory step commits like a disk step (every rank reported, files
// checked) and is recorded with its tier; a report outside the folder or for
// a job without the tier is refused; a committed disk step drops the memory
// steps below it; the resumed event names the tier; a restart resumes from
// the newer memory step; the folder is removed once the ended job's processes
// are gone; a job of another launcher keeps one folder per host and commits
// from the reports (PerHostMemoryTierTest).
#include <gtest/gtest.h>

#include "coordinator/jobs/control_loop.h"
#include "coordinator/jobs/worker_gateway.h"
#include "coordinator/state/auth.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"
#include "shard/spec/run_fingerprint.h"
#include "tests/unit/coordinator/jobs/jobs_test_util.h"

namespace shardd::testing {
namespace {

class MemoryTierTest : public JobPartsTest {
 protected:
  void SetUp() override {
    JobPartsTest::SetUp();
    gateway_ = std::make_unique<WorkerGateway>(opts_, table_.get(), attempts_.get(), runner_.get(), &rendezvous_);
    loop_ = std::make_unique<ControlLoop>(opts_, table_.get(), runner_.get(), attempts_.get(), sched_.get(),
                                          &rendezvous_);
  }
  // A local job of two ranks with the memory tier on (every 5 steps), not launched.
  Job& MemoryJob() {
    Job& j = AddJob();
    j.config.checkpoint.memory.every_steps = 5;
    j.config.checkpoint.memory.dir = Path("shm");
    return j;
  }
  std::string Token(Job& j) { return Begin(j).env.at("SHARDD_WORKER_TOKEN"); }
  // Writes step `step`'s two shard files in `dir` and reports them from both
  // ranks in `tier`; returns the last report's result.
  StatusOr<v1::ReportCheckpointResponse> ReportStep(Job& j, const std::string& token, const std::string& dir,
                                                    int64_t step, const std::string& tier) {
    shard::Manifest base;
    base.job = j.name;
    base.step = step;
    base.world = 2;
    base.strategy = "full_shard";
    base.shard_count = 2;
    base.samples_seen = step * 4;
    base.global_batch = 4;
    base.units = {{"embed", 10}};
    base.run_fingerprint = shard::RunFingerprint(shard::RunKeysOf(j.config));
    const std::string step_dir = dir + "/" + shard::StepDirName(step);
    fs::create_directories(step_dir);
    StatusOr<v1::ReportCheckpointResponse> last = shard::Internal("no report");
    for (int r = 0; r < 2; ++r) {
      // A real shard: half of the one unit, so a restart can prove the step complete.
      shard::ShardHeader h;
      h.step = step;
      h.world = 2;
      h.rank = r;
      h.shard_rank = r;
      h.shard_count = 2;
      h.units.push_back({"embed", 10, 5 * r, 5, 0, shard::DType::kF32});
      const std::vector<float> values(5, 0.5f * static_cast<float>(step + r));
      auto wf = shard::WriteShardFile(step_dir, h, {{values.data(), values.data(), values.data()}});
      if (!wf.ok()) return wf.status();
      v1::ReportCheckpointRequest req;
      *req.mutable_id() = Worker(j.id, j.attempt, r);
      req.set_step(step);
      req.set_step_dir(step_dir);
      req.set_manifest_base(base.ToJson());
      req.set_checkpoint_tier(tier == "memory" ? v1::CHECKPOINT_TIER_MEMORY : v1::CHECKPOINT_TIER_DISK);
      v1::CheckpointFile* f = req.add_files();
      f->set_name(wf->name);
      f->set_shard_rank(r);
      f->set_size(wf->size);
      f->set_xxh64(wf->xxh64);
      last = gateway_->ReportCheckpoint(req, token);
      if (!last.ok()) return last;
    }
    return last;
  }
  // The attempt fails for `why`, its processes are gone, and after the
  // backoff the next attempt begins.
  void FailAndRestart(Job& j, const std::string& why) {
    const int attempt = j.attempt;
    {
      auto lock = table_->Lock();
      attempts_->Fail(j, why, true);
    }
    launcher_.SetRunning(j.id, attempt, 0);
    now_ms_ += 10000;
    loop_->Tick();
    loop_->Tick();
  }
  bool HasEvent(const std::string& id, const std::string& kind, const std::string& text) {
    for (const EventRecord& e : Events(id))
      if (e.kind == kind && e.message.find(text) != std::string::npos) return true;
    return false;
  }
  std::unique_ptr<WorkerGateway> gateway_;
  std::unique_ptr<ControlLoop> loop_;
};

// A rank that could not write a memory step (a full tmpfs) says so; the
// coordinator says it once per step, whichever ranks skip it, and the job
// runs on. Only a memory step may be skipped.
TEST_F(MemoryTierTest, ASkippedMemoryStepIsOneEventAndTheJobRunsOn) {
  Job& j = MemoryJob();
  const std::string token = Token(j);
  auto skip = [&](int rank, int64_t step, const std::string& why, const std::string& tier = "memory") {
    v1::ReportCheckpointRequest req;
    *req.mutable_id() = Worker(j.id, j.attempt, rank);
    req.set_step(step);
    req.set_checkpoint_tier(tier == "memory" ? v1::CHECKPOINT_TIER_MEMORY : v1::CHECKPOINT_TIER_DISK);
    req.set_memory_skipped(why);
    return gateway_->ReportCheckpoint(req, token);
  };
  const std::string full = "cannot create checkpoint shard /dev/shm/x/step_00000005/rank_00000-of-00002.shard.tmp: "
                           "No space left on device";
  ASSERT_TRUE(skip(0, 5, full).ok());
  ASSERT_TRUE(skip(1, 5, full).ok());
  ASSERT_TRUE(skip(1, 10, std::string(5000, 'x')).ok());
  std::vector<std::string> said;
  for (const EventRecord& e : Events(j.id))
    if (e.kind == "memory_step_skipped") said.push_back(e.message);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[0], "step 5: " + full + " (rank 0); training and disk checkpoints go on");
  EXPECT_EQ(said[1].rfind("step 10: xxx", 0), 0u) << said[1];
  EXPECT_LT(said[1].size(), 400u) << "a worker's text is bounded before it is stored";
  EXPECT_TRUE(j.state == v1::LAUNCHING || j.state == v1::RUNNING) << j.reason;
  auto disk = skip(0, 20, full, "disk");
  ASSERT_FALSE(disk.ok());
  EXPECT_NE(disk.status().message().find("only a memory step may be skipped"), std::string::npos)
      << disk.status().message();
}

TEST_F(MemoryTierTest, RegisterHandsTheRanksTheTiersFolder) {
  Job& j = MemoryJob();
  const std::string token = Token(j);
  v1::RegisterRequest req;
  *req.mutable_id() = Worker(j.id, 1, 0);
  req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
  auto resp = gateway_->Register(req, token);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->resume_plan().memory_dir(), MemoryTierDirOf(j));
  EXPECT_EQ(resp->resume_plan().memory_dir().rfind(Path("shm") + "/tiny-", 0), 0u) << resp->resume_plan().memory_dir();
  // Without the tier in the job file: no folder, so the ranks write none.
  Job& plain = AddJob("plain");
  const std::string t2 = Token(plain);
  *req.mutable_id() = Worker(plain.id, 1, 0);
  auto none = gateway_->Register(req, t2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->resume_plan().memory_dir(), "");
}

TEST_F(MemoryTierTest, AMemoryStepCommitsLikeADiskStepAndIsRecordedWithItsTier) {
  Job& j = MemoryJob();
  const std::string token = Token(j);
  const std::string mem = MemoryTierDirOf(j);
  auto resp = ReportStep(j, token, mem, 5, "memory");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_TRUE(resp->committed());
  EXPECT_TRUE(fs::exists(mem + "/" + shard::StepDirName(5) + "/COMMITTED"));
  auto stored = store_->LoadCheckpoints(j.id);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->front().tier, "memory");
  EXPECT_EQ(stored->front().path, mem + "/" + shard::StepDirName(5));
  EXPECT_TRUE(HasEvent(j.id, "checkpoint_committed", "step 5: 2 shard(s)") &&
              HasEvent(j.id, "checkpoint_committed", "(memory tier)"));
  EXPECT_EQ(j.progress.last_committed_step(), 5);
}

TEST_F(MemoryTierTest, MemoryReportsOutsideTheFolderOrWithoutTheTierAreRefused) {
  Job& j = MemoryJob();
  const std::string token = Token(j);
  // A memory step in the disk folder: not where the tier lives.
  auto wrong = ReportStep(j, token, CheckpointDirOf(j), 5, "memory");
  EXPECT_EQ(wrong.status().code(), shard::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("outside the job's " + MemoryTierDirOf(j)), std::string::npos)
      << wrong.status().ToString();
  auto bad_tier = ReportStep(j, token, MemoryTierDirOf(j), 5, "ram");
  EXPECT_EQ(bad_tier.status().code(), shard::StatusCode::kInvalidArgument);
  Job& plain = AddJob("plain");
  const std::string t2 = Token(plain);
  auto off = ReportStep(plain, t2, Path("shm/plain-0"), 5, "memory");
  EXPECT_EQ(off.status().code(), shard::StatusCode::kFailedPrecondition) << off.status().ToString();
}

TEST_F(MemoryTierTest, ACommittedDiskStepDropsTheMemoryStepsBelowIt) {
  Job& j = MemoryJob();
  j.config.checkpoint.memory.keep_last = 5;
  const std::string token = Token(j);
  const std::string mem = MemoryTierDirOf(j);
  for (int64_t s : {5, 10, 15}) ASSERT_TRUE(ReportStep(j, token, mem, s, "memory").ok());
  ASSERT_TRUE(ReportStep(j, token, CheckpointDirOf(j), 12, "disk").ok());
  auto left = shard::ListSteps(mem);
  ASSERT_TRUE(left.ok());
  std::vector<int64_t> steps;
  for (const auto& s : *left) steps.push_back(s.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{15}));
  auto stored = store_->LoadCheckpoints(j.id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->back().tier, "memory");
  EXPECT_EQ((*stored)[2].tier, "disk");  // 5, 10, 12, 15 by step
}

TEST_F(MemoryTierTest, MemoryKeepLastAppliesToTheMemoryTier) {
  Job& j = MemoryJob();  // memory keep_last 2; disk keep_last 2 as well, counted apart
  const std::string token = Token(j);
  const std::string mem = MemoryTierDirOf(j);
  ASSERT_TRUE(ReportStep(j, token, CheckpointDirOf(j), 1, "disk").ok());
  for (int64_t s : {5, 10, 15}) ASSERT_TRUE(ReportStep(j, token, mem, s, "memory").ok());
  auto left = shard::ListSteps(mem);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ(left->front().step, 10);
  EXPECT_TRUE(fs::exists(CheckpointDirOf(j) + "/" + shard::StepDirName(1) + "/COMMITTED"));
}

TEST_F(MemoryTierTest, TheResumedEventNamesStepAndTier) {
  Job& j = MemoryJob();
  const std::string token = Token(j);
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = Worker(j.id, 1, 0);
  hb.set_state("training");
  hb.set_step(30);
  hb.set_resumed_from("/dev/shm/shardd/tiny-0/step_00000030");
  hb.set_resumed_step(30);
  hb.set_resumed_checkpoint_tier(v1::CHECKPOINT_TIER_MEMORY);
  ASSERT_TRUE(gateway_->Heartbeat(hb, token).ok());
  EXPECT_TRUE(HasEvent(j.id, "resumed", "resumed from step 30 (memory): /dev/shm/shardd/tiny-0/step_00000030"));
}

TEST_F(MemoryTierTest, ARestartResumesFromTheNewerMemoryStep) {
  Job& j = MemoryJob();
  j.launcher = &launcher_;
  loop_->Tick();  // attempt 1
  ASSERT_EQ(j.attempt, 1);
  const std::string token = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  ASSERT_TRUE(ReportStep(j, token, CheckpointDirOf(j), 20, "disk").ok());
  ASSERT_TRUE(ReportStep(j, token, MemoryTierDirOf(j), 25, "memory").ok());
  FailAndRestart(j, "rank 1 was killed");
  ASSERT_EQ(j.attempt, 2);
  EXPECT_EQ(j.ckpt.resume_from(), MemoryTierDirOf(j) + "/" + shard::StepDirName(25));
  // The memory tier lost it (a reboot): the restart takes the disk step.
  fs::remove_all(MemoryTierDirOf(j));
  FailAndRestart(j, "rank 0 was killed");
  ASSERT_EQ(j.attempt, 3);
  EXPECT_EQ(j.ckpt.resume_from(), CheckpointDirOf(j) + "/" + shard::StepDirName(20));
}

// Issue 39 item 6, the local tier: a damaged newest memory step falls back to
// the previous one (an event names the step skipped and why); every step
// damaged and nothing on disk starts from step 0 with an event saying why.
TEST_F(MemoryTierTest, ADamagedMemoryStepIsSkippedWithAnEventAndStepZeroIsSaid) {
  Job& j = MemoryJob();
  j.launcher = &launcher_;
  loop_->Tick();  // attempt 1
  const std::string token = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  const std::string mem = MemoryTierDirOf(j);
  ASSERT_TRUE(ReportStep(j, token, mem, 25, "memory").ok());
  ASSERT_TRUE(ReportStep(j, token, mem, 30, "memory").ok());
  auto flip = [](const std::string& path) {
    std::string b = ReadBytes(path);
    b[b.size() - 3] ^= 0x10;
    WriteBytes(path, b);
  };
  flip(mem + "/" + shard::StepDirName(30) + "/" + shard::ShardFileName(1, 2));
  FailAndRestart(j, "rank 1 was killed");
  ASSERT_EQ(j.attempt, 2);
  EXPECT_EQ(j.ckpt.resume_from(), mem + "/" + shard::StepDirName(25));
  EXPECT_TRUE(HasEvent(j.id, "resume_skipped", "skipping step 30 (memory): "));
  EXPECT_FALSE(HasEvent(j.id, "resume_from_scratch", ""));
  flip(mem + "/" + shard::StepDirName(25) + "/" + shard::ShardFileName(0, 2));
  FailAndRestart(j, "rank 0 was killed");
  ASSERT_EQ(j.attempt, 3);
  EXPECT_TRUE(HasEvent(j.id, "resume_skipped", "skipping step 25 (memory): "));
  EXPECT_TRUE(HasEvent(j.id, "resume_from_scratch",
                       "starting from step 0: every committed step of this run failed its checks (2 skipped"));
}

// A job whose ranks may span hosts (here Slurm): one folder per host under
// the tier's root, commits from the reports alone (every shard, and its
// partner copy when the ranks are on two hosts), nothing read or written in
// those folders, and the next attempt hands the ranks the committed manifest.
class PerHostMemoryTierTest : public MemoryTierTest {
 protected:
  Job& SlurmMemoryJob() {
    Job& j = MemoryJob();
    j.config.resources.launcher = shard::Launcher::kSlurm;
    j.launcher = &launcher_;
    return j;
  }
  // Registers rank r on `host`.
  StatusOr<v1::RegisterResponse> RegisterOn(Job& j, const std::string& token, int r, const std::string& host) {
    v1::RegisterRequest req;
    *req.mutable_id() = Worker(j.id, j.attempt, r);
    req.set_protocol_version(v1::PROTOCOL_VERSION_CURRENT);
    req.set_hostname(host);
    return gateway_->Register(req, token);
  }
  // Both ranks report step `step` from their host's folder (no file is
  // written: the coordinator must not look); partner[r] < 0 = no copy landed.
  StatusOr<v1::ReportCheckpointResponse> ReportFromHosts(Job& j, const std::string& token, int64_t step,
                                                         const std::vector<std::string>& hosts,
                                                         const std::vector<int>& partner) {
    shard::Manifest base;
    base.job = j.name;
    base.step = step;
    base.world = 2;
    base.strategy = "full_shard";
    base.shard_count = 2;
    base.units = {{"embed", 10}};
    base.samples_seen = step * 4;
    base.global_batch = 4;
    base.run_fingerprint = shard::RunFingerprint(shard::RunKeysOf(j.config));
    StatusOr<v1::ReportCheckpointResponse> last = shard::Internal("no report");
    for (int r = 0; r < 2; ++r) {
      v1::ReportCheckpointRequest req;
      *req.mutable_id() = Worker(j.id, j.attempt, r);
      req.set_step(step);
      req.set_step_dir(MemoryTierDirOf(j) + "/host-" + hosts[r] + "/" + shard::StepDirName(step));
      req.set_manifest_base(base.ToJson());
      req.set_checkpoint_tier(v1::CHECKPOINT_TIER_MEMORY);
      v1::CheckpointFile* f = req.add_files();
      f->set_name(shard::ShardFileName(r, 2));
      f->set_shard_rank(r);
      f->set_size(100 + r);
      f->set_xxh64(0xabc0 + r);
      f->set_partner_copy(partner[r] >= 0);
      f->set_partner_rank(partner[r]);
      last = gateway_->ReportCheckpoint(req, token);
      if (!last.ok()) return last;
    }
    return last;
  }
};

TEST_F(PerHostMemoryTierTest, EveryLauncherRunsTheTierAndRegisterSaysPerHost) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  EXPECT_TRUE(MemoryTierPerHost(j));
  auto resp = RegisterOn(j, token, 0, "a");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->resume_plan().memory_dir(), MemoryTierDirOf(j));
  EXPECT_TRUE(resp->resume_plan().memory_per_host());
  EXPECT_EQ(resp->resume_plan().memory_manifest(), "");
  Job& local = MemoryJob();
  EXPECT_FALSE(MemoryTierPerHost(local));
}

TEST_F(PerHostMemoryTierTest, AStepCommitsFromTheReportsWithPartnerCopiesAcrossHosts) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "b").ok());
  auto resp = ReportFromHosts(j, token, 5, {"a", "b"}, {1, 0});
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_TRUE(resp->committed());
  EXPECT_FALSE(fs::exists(MemoryTierDirOf(j))) << "the coordinator wrote in a host's folder";
  EXPECT_EQ(j.ckpt.memory_step(), 5);
  auto m = shard::Manifest::FromJson(j.ckpt.memory_manifest(), "test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[1].size, 101u);
  EXPECT_EQ(m->files[1].xxh64, 0xabc1u);
  auto stored = store_->LoadCheckpoints(j.id);
  ASSERT_TRUE(stored.ok() && stored->size() == 1u);
  EXPECT_EQ(stored->front().tier, "memory");
  EXPECT_EQ(j.progress.last_committed_step(), 5);
}

TEST_F(PerHostMemoryTierTest, WithoutItsPartnerCopyAStepDoesNotCommit) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "b").ok());
  auto resp = ReportFromHosts(j, token, 5, {"a", "b"}, {1, -1});
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_FALSE(resp->committed());
  EXPECT_EQ(j.ckpt.memory_step(), -1);
  EXPECT_TRUE(HasEvent(j.id, "memory_step_not_committed", "has no partner copy on another host"));
  // The next step, with both copies, commits.
  auto next = ReportFromHosts(j, token, 10, {"a", "b"}, {1, 0});
  ASSERT_TRUE(next.ok() && next->committed());
  EXPECT_EQ(j.ckpt.memory_step(), 10);
}

TEST_F(PerHostMemoryTierTest, OnOneHostNoPartnerCopyIsNeeded) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "a").ok());
  auto resp = ReportFromHosts(j, token, 5, {"a", "a"}, {-1, -1});
  ASSERT_TRUE(resp.ok() && resp->committed()) << resp.status().ToString();
}

TEST_F(PerHostMemoryTierTest, AReportOutsideTheHostFoldersIsRefused) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  auto wrong = ReportFromHosts(j, token, 5, {"../x", "b"}, {1, 0});
  EXPECT_EQ(wrong.status().code(), shard::StatusCode::kInvalidArgument) << wrong.status().ToString();
}

TEST_F(PerHostMemoryTierTest, AnExternalJobsRestartHandsTheRanksTheCommittedManifest) {
  // External workers join: Begin launches nothing, the plan still applies.
  Job& j = MemoryJob();
  j.config.resources.launcher = shard::Launcher::kExternal;
  j.join_token = NewJobToken();
  loop_->Tick();  // attempt 1
  ASSERT_EQ(j.attempt, 1);
  const std::string token = ExternalWorkerToken(j.join_token, 1);
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "b").ok());
  ASSERT_TRUE(ReportFromHosts(j, token, 25, {"a", "b"}, {1, 0}).ok());
  FailAndRestart(j, "host b was lost");
  ASSERT_EQ(j.attempt, 2);
  EXPECT_EQ(j.ckpt.resume_memory_manifest(), j.ckpt.memory_manifest());
  EXPECT_NE(j.ckpt.memory_manifest(), "");
}

TEST_F(PerHostMemoryTierTest, ARestartHandsTheRanksTheCommittedManifestAndKeepsTheFolders) {
  Job& j = SlurmMemoryJob();
  loop_->Tick();  // attempt 1
  ASSERT_EQ(j.attempt, 1);
  const std::string token = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "b").ok());
  ASSERT_TRUE(ReportStep(j, token, CheckpointDirOf(j), 20, "disk").ok());
  ASSERT_TRUE(ReportFromHosts(j, token, 25, {"a", "b"}, {1, 0}).ok());
  WriteBytes(MemoryTierDirOf(j) + "/host-a/" + shard::StepDirName(25) + "/x", "a host's shard");
  FailAndRestart(j, "host b was lost");
  ASSERT_EQ(j.attempt, 2);
  // The disk step stays the fallback; the memory step's manifest goes to the ranks.
  EXPECT_EQ(j.ckpt.resume_from(), CheckpointDirOf(j) + "/" + shard::StepDirName(20));
  EXPECT_EQ(j.ckpt.resume_memory_manifest(), j.ckpt.memory_manifest());
  EXPECT_TRUE(HasEvent(j.id, "resume_plan", "resuming from memory step 25"));
  const std::string token2 = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  auto resp = RegisterOn(j, token2, 1, "b2");
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->resume_plan().memory_manifest(), j.ckpt.memory_manifest());
  // A newer disk step wins over it at the next restart.
  ASSERT_TRUE(ReportStep(j, token2, CheckpointDirOf(j), 30, "disk").ok());
  FailAndRestart(j, "rank 0 was killed");
  ASSERT_EQ(j.attempt, 3);
  EXPECT_EQ(j.ckpt.resume_memory_manifest(), "");
  // The job ends: the hosts' folders are the workers' to remove.
  {
    auto lock = table_->Lock();
    attempts_->End(j);
    table_->SetState(j, v1::CANCELLED, "ended", "test");
  }
  launcher_.SetRunning(j.id, 3, 0);
  loop_->Tick();
  loop_->Tick();
  EXPECT_TRUE(fs::exists(MemoryTierDirOf(j) + "/host-a/" + shard::StepDirName(25) + "/x"));
}

// Issue 39 item 6, per host: a restart hands the ranks the older committed
// memory steps too (newest first, at most memory.keep_last, none older than
// the disk step), and the fallbacks the workers report become events once.
TEST_F(PerHostMemoryTierTest, ARestartHandsTheRanksTheOlderMemoryStepsAsFallbacks) {
  Job& j = SlurmMemoryJob();  // memory.keep_last 2
  loop_->Tick();
  const std::string token = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  ASSERT_TRUE(RegisterOn(j, token, 0, "a").ok());
  ASSERT_TRUE(RegisterOn(j, token, 1, "b").ok());
  ASSERT_TRUE(ReportStep(j, token, CheckpointDirOf(j), 12, "disk").ok());
  std::map<int64_t, std::string> manifests;
  for (int64_t step : {15, 20, 25}) {
    ASSERT_TRUE(ReportFromHosts(j, token, step, {"a", "b"}, {1, 0}).ok());
    manifests[step] = j.ckpt.memory_manifest();
  }
  FailAndRestart(j, "host b was lost");
  ASSERT_EQ(j.attempt, 2);
  EXPECT_EQ(j.ckpt.resume_memory_manifest(), manifests[25]);
  ASSERT_EQ(j.ckpt.resume_memory_fallbacks().size(), 2u);
  EXPECT_EQ(j.ckpt.resume_memory_fallbacks()[0], manifests[20]);
  EXPECT_EQ(j.ckpt.resume_memory_fallbacks()[1], manifests[15]);
  EXPECT_TRUE(HasEvent(j.id, "resume_plan", "resuming from memory step 25 (committed on the ranks' hosts; then the 2 "
                                            "older memory step(s), then disk step 12"));
  const std::string token2 = launcher_.launches.back().env.at("SHARDD_WORKER_TOKEN");
  auto resp = RegisterOn(j, token2, 1, "b2");
  ASSERT_TRUE(resp.ok());
  ASSERT_EQ(resp->resume_plan().memory_fallbacks_size(), 2);
  EXPECT_EQ(resp->resume_plan().memory_fallbacks(0), manifests[20]);
  // Rank 0 says what the hosts skipped (every heartbeat): one event each, once.
  for (int beat = 0; beat < 2; ++beat) {
    v1::HeartbeatRequest hb;
    *hb.mutable_id() = Worker(j.id, 2, 0);
    hb.set_state("training");
    hb.set_step(20);
    hb.set_resumed_from(MemoryTierDirOf(j) + "/host-a/" + shard::StepDirName(20));
    hb.set_resumed_step(20);
    hb.set_resumed_checkpoint_tier(v1::CHECKPOINT_TIER_MEMORY);
    hb.add_resume_events("skipping step 25 (memory): rank 0 on host a lacks rank_00001-of-00002.shard (rank 1: "
                         "not there)");
    ASSERT_TRUE(gateway_->Heartbeat(hb, token2).ok());
  }
  int skipped = 0;
  for (const EventRecord& e : Events(j.id)) skipped += e.kind == "resume_skipped";
  EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(HasEvent(j.id, "resume_skipped", "skipping step 25 (memory): rank 0 on host a lacks"));
  EXPECT_TRUE(HasEvent(j.id, "resumed", "resumed from step 20 (memory)"));
}

TEST_F(PerHostMemoryTierTest, AStartFromStepZeroTheWorkersReportIsAnEvent) {
  Job& j = SlurmMemoryJob();
  const std::string token = Token(j);
  v1::HeartbeatRequest hb;
  *hb.mutable_id() = Worker(j.id, 1, 0);
  hb.set_state("training");
  hb.add_resume_events("skipping step 530 (memory): rank 0 on host a lacks rank_00001-of-00002.shard (…)");
  hb.add_resume_events("starting from step 0: no committed memory step could be assembled on every host and the "
                       "disk tier holds no committed step of this run");
  ASSERT_TRUE(gateway_->Heartbeat(hb, token).ok());
  EXPECT_TRUE(HasEvent(j.id, "resume_skipped", "skipping step 530 (memory)"));
  EXPECT_TRUE(HasEvent(j.id, "resume_from_scratch", "starting from step 0: no committed memory step"));
}

// Each job has its own folder, so no later job shares and drops an ended
// per-host job's host folders: Register names the ended ones (never a live
// job's) for the workers to remove their host's part.
TEST_F(PerHostMemoryTierTest, RegisterNamesEndedPerHostJobsFoldersForTheHostsToRemove) {
  Job& ended = SlurmMemoryJob();
  Job& live_other = SlurmMemoryJob();
  Job& j = SlurmMemoryJob();
  {
    auto lock = table_->Lock();
    table_->SetState(ended, v1::FAILED, "failed", "test");
  }
  const std::string token = Token(j);
  auto resp = RegisterOn(j, token, 0, "a");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  ASSERT_EQ(resp->resume_plan().ended_memory_dirs_size(), 1);
  EXPECT_EQ(resp->resume_plan().ended_memory_dirs(0), MemoryTierDirOf(ended));
  EXPECT_NE(resp->resume_plan().ended_memory_dirs(0), MemoryTierDirOf(live_other));
  EXPECT_NE(resp->resume_plan().ended_memory_dirs(0), MemoryTierDirOf(j));
}

TEST_F(MemoryTierTest, TheFolderIsRemovedOnceTheEndedJobsProcessesAreGone) {
  for (v1::JobState end : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    Job& j = MemoryJob();
    j.launcher = &launcher_;
    loop_->Tick();
    const std::string mem = MemoryTierDirOf(j);
    WriteBytes(mem + "/" + shard::StepDirName(5) + "/x", "shard");
    {
      auto lock = table_->Lock();
      attempts_->End(j);
      table_->SetState(j, end, "ended", "test");
    }
    loop_->Tick();
    EXPECT_TRUE(fs::exists(mem)) << "removed while the attempt's processes may still write";
    launcher_.SetRunning(j.id, 1, 0);
    loop_->Tick();
    EXPECT_FALSE(fs::exists(mem)) << JobStateName(end);
    EXPECT_TRUE(fs::exists(Path("shm"))) << "only the job's folder goes";
  }
}

}  // namespace
}  // namespace shardd::testing
