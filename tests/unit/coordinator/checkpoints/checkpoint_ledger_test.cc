// A job's checkpoint owner (coordinator/checkpoints/checkpoint_ledger.h),
// tested alone: per-host memory steps committed from reports become the
// newest resume point with bounded fallbacks; BeginAttempt resets the
// attempt's plan and says its resume step; PlanMemoryResume wins only over
// an older disk step; the plan handed to workers (and its wire form) carries
// tier, step, folders, the manifest and fallbacks; counters and the
// once-per-attempt events.
#include "coordinator/checkpoints/checkpoint_ledger.h"

#include <gtest/gtest.h>

#include "proto/codec/resume_plan_codec.h"
#include "shard/ckpt/catalog.h"
#include "shard/ckpt/shard_file.h"

namespace shardd::testing {
namespace {

// One rank's report of a per-host memory step (committed from the reports alone).
ShardReport MemoryReport(int64_t step, int shard_rank, int shard_count) {
  shard::Manifest base;
  base.job = "tiny";
  base.step = step;
  base.world = shard_count;
  base.strategy = "full_shard";
  base.shard_count = shard_count;
  base.samples_seen = step * 16;
  base.global_batch = 16;
  base.units = {{"embed", 10}};
  ShardReport r;
  r.rank = shard_rank;
  r.step = step;
  r.step_dir = "/shm/tiny-1/host-a/" + shard::StepDirName(step);
  r.manifest_base = base.ToJson();
  r.tier = shard::CheckpointTier::kMemory;
  r.remote = true;
  r.files.push_back({shard::ShardFileName(shard_rank, shard_count), shard_rank, 64, 0xabc0u + uint64_t(shard_rank)});
  return r;
}

// Reports every shard of a memory step at `now`; the last one commits it.
void CommitMemoryStep(CheckpointLedger& l, int64_t step, int64_t now) {
  for (int sr = 0; sr < 2; ++sr) {
    auto added = l.Add(MemoryReport(step, sr, 2), now);
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    ASSERT_EQ(added->has_value(), sr == 1);
    if (added->has_value()) l.Committed(MemoryReport(step, sr, 2), **added, now + 500);
  }
}

TEST(CheckpointLedgerTest, RefusesReportsBeforeInit) {
  CheckpointLedger l;
  auto added = l.Add(MemoryReport(5, 0, 2), 0);
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.status().code(), shard::StatusCode::kFailedPrecondition);
  EXPECT_NE(added.status().message().find("rank 0"), std::string::npos) << added.status().message();
}

TEST(CheckpointLedgerTest, PerHostMemoryStepsKeepNewestAndBoundedFallbacks) {
  CheckpointLedger l;
  l.Init(/*keep_last=*/3, /*memory_keep_last=*/2);
  EXPECT_EQ(l.memory_step(), -1);
  for (int64_t step : {5, 10, 15, 20}) CommitMemoryStep(l, step, step * 1000);
  EXPECT_EQ(l.memory_step(), 20);
  EXPECT_EQ(l.memory_step_dir(), "/shm/tiny-1/host-a/" + shard::StepDirName(20));
  auto m = shard::Manifest::FromJson(l.memory_manifest(), "test");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->step, 20);
  EXPECT_EQ(m->files.size(), 2u);
  EXPECT_EQ(l.committed(), 4);
  EXPECT_EQ(l.commit_seconds().count, 4u);
  // Disk step 12: the memory steps newer than it (20, then 15; 10 and 5 are
  // older, and 5 was dropped by memory_keep_last) are the plan.
  EXPECT_EQ(l.BeginAttempt("/ckpt/tiny/" + shard::StepDirName(12)), 12);
  EXPECT_EQ(l.PlanMemoryResume(12), 1);
  shard::ResumePlan plan = l.Plan("/shm/tiny-1", /*per_host=*/true, {"/shm/old-1"});
  EXPECT_EQ(plan.tier, shard::CheckpointTier::kMemory);
  EXPECT_EQ(plan.step, 20);
  EXPECT_EQ(plan.resume_from, "/ckpt/tiny/" + shard::StepDirName(12));
  EXPECT_EQ(plan.memory_manifest, l.memory_manifest());
  ASSERT_EQ(plan.memory_fallbacks.size(), 1u);
  EXPECT_EQ(shard::Manifest::FromJson(plan.memory_fallbacks[0], "test")->step, 15);
  EXPECT_EQ(plan.memory_dir, "/shm/tiny-1");
  EXPECT_TRUE(plan.memory_per_host);
  EXPECT_EQ(plan.ended_memory_dirs, std::vector<std::string>{"/shm/old-1"});
  // The next attempt starts with no memory plan until it is planned again.
  EXPECT_EQ(l.BeginAttempt("none"), 0);
  EXPECT_EQ(l.Plan("/shm/tiny-1", true, {}).tier, shard::CheckpointTier::kDisk);
  EXPECT_EQ(l.resume_memory_manifest(), "");
}

TEST(CheckpointLedgerTest, MemoryStepOnlyWinsOverAnOlderDiskStep) {
  CheckpointLedger l;
  l.Init(3, 2);
  EXPECT_EQ(l.PlanMemoryResume(-1), -1) << "no memory step held";
  CommitMemoryStep(l, 10, 0);
  l.BeginAttempt("/ckpt/tiny/" + shard::StepDirName(10));
  EXPECT_EQ(l.PlanMemoryResume(10), -1);
  EXPECT_EQ(l.resume_memory_manifest(), "");
  EXPECT_EQ(l.PlanMemoryResume(-1), 0);
  EXPECT_EQ(l.resume_memory_manifest(), l.memory_manifest());
}

TEST(CheckpointLedgerTest, DiskPlanNamesTheStepAndTheLocalMemoryTier) {
  CheckpointLedger l;
  l.Init(3, 2);
  EXPECT_EQ(l.BeginAttempt("/ckpt/tiny/" + shard::StepDirName(40)), 40);
  shard::ResumePlan disk = l.Plan("/shm/tiny-1", /*per_host=*/false, {"/shm/old-1"});
  EXPECT_EQ(disk.tier, shard::CheckpointTier::kDisk);
  EXPECT_EQ(disk.step, 40);
  EXPECT_FALSE(disk.memory_per_host);
  EXPECT_TRUE(disk.ended_memory_dirs.empty()) << "only a per-host tier's workers remove ended folders";
  // A step of the local memory tier's folder is a memory resume.
  l.BeginAttempt("/shm/tiny-1/" + shard::StepDirName(45));
  shard::ResumePlan mem = l.Plan("/shm/tiny-1", false, {});
  EXPECT_EQ(mem.tier, shard::CheckpointTier::kMemory);
  EXPECT_EQ(mem.step, 45);
  EXPECT_EQ(l.Plan("", false, {}).memory_dir, "");
}

TEST(CheckpointLedgerTest, OncePerAttemptAndPerSkippedStep) {
  CheckpointLedger l;
  EXPECT_TRUE(l.NoteMemorySkipped(10));
  EXPECT_FALSE(l.NoteMemorySkipped(10));
  EXPECT_FALSE(l.NoteMemorySkipped(5));
  EXPECT_TRUE(l.NoteMemorySkipped(15));
  EXPECT_TRUE(l.TakeResumedEvent(2));
  EXPECT_FALSE(l.TakeResumedEvent(2));
  l.MarkResumedEvent(3);  // recovery: the store already holds attempt 3's event
  EXPECT_FALSE(l.TakeResumedEvent(3));
  EXPECT_TRUE(l.TakeResumeEvents(3));
  EXPECT_FALSE(l.TakeResumeEvents(3));
}

TEST(CheckpointLedgerTest, RestoreTakesWhatTheStoreKeptAndNoMemoryStep) {
  CheckpointLedger l;
  l.Init(3, 2);
  l.Restore("/shm/tiny-1", /*memory_tier_removed=*/true);
  EXPECT_EQ(l.stored_memory_dir(), "/shm/tiny-1");
  EXPECT_TRUE(l.memory_tier_removed());
  EXPECT_EQ(l.memory_step(), -1) << "per-host memory steps live in the coordinator's memory only";
  EXPECT_EQ(l.PlanMemoryResume(-1), -1);
}

// The plan names what the control loop chose (issue 40 item 2): a step, or
// "none" for scratch, never "auto"; a restarted coordinator that adopted an
// attempt chose nothing and leaves the job file's choice.
TEST(CheckpointLedgerTest, ThePlanNamesTheChosenStepOrNone) {
  CheckpointLedger l;
  l.Init(3, 2);
  EXPECT_EQ(l.Plan("", false, {}).resume_from, "") << "adopted: nothing chosen here";
  l.BeginAttempt("", /*this_run_only=*/false);
  EXPECT_EQ(l.Plan("", false, {}).resume_from, "none");
  const std::string step = "/ckpt/tiny/" + shard::StepDirName(40);
  EXPECT_EQ(l.BeginAttempt(step, /*this_run_only=*/true), 40);
  const shard::ResumePlan p = l.Plan("", false, {});
  EXPECT_EQ(p.resume_from, step);
  EXPECT_EQ(p.step, 40);
  EXPECT_TRUE(p.this_run_only);
}

TEST(CheckpointLedgerTest, PlanCrossesTheWireUnchanged) {
  shard::ResumePlan p;
  p.tier = shard::CheckpointTier::kMemory;
  p.step = 25;
  p.resume_from = "/ckpt/tiny/" + shard::StepDirName(20);
  p.memory_dir = "/shm/tiny-1";
  p.memory_per_host = true;
  p.memory_manifest = "{\"step\":25}";
  p.memory_fallbacks = {"{\"step\":22}", "{\"step\":21}"};
  p.ended_memory_dirs = {"/shm/old-1"};
  p.this_run_only = true;
  v1::ResumePlan wire;
  ASSERT_TRUE(wire.ParseFromString(ToResumePlanProto(p).SerializeAsString()));
  EXPECT_EQ(wire.tier(), v1::CHECKPOINT_TIER_MEMORY);
  auto parsed = FromResumePlanProto(wire);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const shard::ResumePlan& back = *parsed;
  EXPECT_EQ(back.this_run_only, true);
  EXPECT_EQ(back.tier, p.tier);
  EXPECT_EQ(back.step, p.step);
  EXPECT_EQ(back.resume_from, p.resume_from);
  EXPECT_EQ(back.memory_dir, p.memory_dir);
  EXPECT_EQ(back.memory_per_host, p.memory_per_host);
  EXPECT_EQ(back.memory_manifest, p.memory_manifest);
  EXPECT_EQ(back.memory_fallbacks, p.memory_fallbacks);
  EXPECT_EQ(back.ended_memory_dirs, p.ended_memory_dirs);
  EXPECT_EQ(FromResumePlanProto(v1::ResumePlan())->tier, shard::CheckpointTier::kDisk);
}

// The tier crosses the wire as CheckpointTierKind (issue 40 item 2); a value
// this build does not know (a newer peer, a corrupt message) is one line.
TEST(CheckpointLedgerTest, AnUnknownTierFromTheWireIsAOneLineError) {
  v1::ResumePlan wire;
  wire.set_tier(static_cast<v1::CheckpointTierKind>(7));
  v1::ResumePlan parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));  // proto3 keeps the unknown value
  auto plan = FromResumePlanProto(parsed);
  ASSERT_EQ(plan.status().code(), shard::StatusCode::kInvalidArgument);
  const std::string msg(plan.status().message());
  EXPECT_NE(msg.find("checkpoint tier 7 is neither disk (0) nor memory (1)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(*FromCheckpointTierProto(v1::CHECKPOINT_TIER_MEMORY, "x"), shard::CheckpointTier::kMemory);
  EXPECT_EQ(ToCheckpointTierProto(shard::CheckpointTier::kMemory), v1::CHECKPOINT_TIER_MEMORY);
  EXPECT_EQ(FromCheckpointTierProto(-1, "heartbeat of rank 3").status().message().rfind("heartbeat of rank 3: ", 0),
            0u);
}

}  // namespace
}  // namespace shardd::testing
