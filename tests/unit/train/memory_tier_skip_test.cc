// A memory tier that cannot be written never fails a run whose disk tier
// works (docs/control-plane.md, "Checkpoint tiers"): each memory step a rank
// cannot write is skipped (memory_step_skipped, told once per step through
// DistContext::memory_step_skipped) while training and disk checkpoints go
// on; folders that are links or another user's are refused, nothing is
// written or deleted through them; the tier's folders are 0700, its files 0600.
// Ranks as threads on the local communicator.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "shard/ckpt/catalog.h"
#include "shard/train/trainer.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {
namespace fs = std::filesystem;

constexpr int kSteps = 8;

std::string Tokens() { return testing_ranks::RandomTokens("memory_skip", 5); }
std::string NewDir(const std::string& name) { return testing_ranks::NewTempDir("memory_skip_" + name); }

const std::string& Yaml() {
  static const std::string y = "name: t\nmodel: {preset: tiny}\ndata: {tokens: " + Tokens() +
                               ", seq_len: 32}\ntrain: {global_batch: 4, micro_batch: 2, lr: 1.0e-3, "
                               "log_every: 1000}\nresources: {device: cpu}\n";
  return y;
}

std::vector<std::string> Sets(const std::string& disk, const std::string& memory_root) {
  return {"parallel.world_size=2", "train.steps=" + std::to_string(kSteps), "checkpoint.dir=" + disk,
          "checkpoint.every_steps=4", "checkpoint.memory.every_steps=1", "checkpoint.memory.dir=" + memory_root};
}

struct Outcome {
  std::vector<int64_t> trained;                              // rank 0's steps
  std::map<int64_t, std::vector<std::string>> skipped;       // step -> why, once per rank that skipped it
  std::vector<int> skips;                                    // per rank: Checkpointer::memory_skips()
};

// Trains both ranks to `stop_after` (the run "dies" there when short of kSteps).
Outcome Train(const std::string& disk, const std::string& memory_root, int stop_after = kSteps) {
  Outcome out;
  out.skips.assign(2, -1);
  std::mutex mu;
  DistContext base;
  base.memory_step_skipped = [&](int64_t step, const std::string& why) {  // on the ranks' save threads
    std::lock_guard<std::mutex> lock(mu);
    out.skipped[step].push_back(why);
  };
  const Status created = testing_ranks::OnTrainerRanks(
      Yaml(), 2, Sets(disk, memory_root),
      [&](Trainer& tr, int r) {
        while (tr.step() < stop_after) {
          auto m = tr.Step();
          ASSERT_TRUE(m.ok()) << "rank " << r << ": " << m.status().ToString();
          if (r == 0) out.trained.push_back(m->step);
        }
        ASSERT_TRUE(tr.checkpointer()->Wait().ok());
        out.skips[r] = tr.checkpointer()->memory_skips();
      },
      base);
  EXPECT_TRUE(created.ok()) << created.ToString();
  return out;
}

std::vector<int64_t> DiskSteps(const std::string& disk) {
  std::vector<int64_t> out;
  auto steps = ListSteps(disk + "/t");
  EXPECT_TRUE(steps.ok());
  if (steps.ok())
    for (const auto& s : *steps)
      if (s.committed) out.push_back(s.step);
  return out;
}

const std::vector<int64_t> kAllSteps = {1, 2, 3, 4, 5, 6, 7, 8};
// Memory steps: every step but the disk tier's (4, 8) and the last.
const std::vector<int64_t> kMemorySteps = {1, 2, 3, 5, 6, 7};

void ExpectEverySkipped(const Outcome& o, const std::string& why) {
  EXPECT_EQ(o.trained, kAllSteps) << "training stopped";
  EXPECT_EQ(o.skips, (std::vector<int>{6, 6}));
  std::vector<int64_t> steps;
  for (const auto& [step, reasons] : o.skipped) {
    steps.push_back(step);
    EXPECT_EQ(reasons.size(), 2u) << "step " << step << ": each rank tells its skip once";
    for (const std::string& r : reasons) EXPECT_NE(r.find(why), std::string::npos) << "step " << step << ": " << r;
  }
  EXPECT_EQ(steps, kMemorySteps);
}

// memory.dir names a file (as /dev/null would be): every memory step is
// skipped, each said once per rank; the run and its disk steps go on.
TEST(MemoryTierSkipTest, AFileAsTheRootSkipsMemoryStepsNotTheRun) {
  const std::string disk = NewDir("file_disk"), base = NewDir("file_root");
  const std::string file = base + "/a-file";
  std::ofstream(file) << "not a folder";
  const Outcome o = Train(disk, file);
  ExpectEverySkipped(o, file + " is not a directory");
  EXPECT_EQ(DiskSteps(disk), (std::vector<int64_t>{4, 8}));
}

// Another user's root (pre-created in a shared place): refused, nothing is
// written in it, and the run goes on from disk.
TEST(MemoryTierSkipTest, AnotherUsersRootIsRefusedAndNothingIsWrittenThere) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to hand a folder to nobody";
  const std::string disk = NewDir("other_disk"), root = NewDir("other_root");
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
  const Outcome o = Train(disk, root);
  ExpectEverySkipped(o, root + " belongs to uid 65534");
  EXPECT_TRUE(fs::is_empty(root)) << "written into another user's folder";
  EXPECT_EQ(DiskSteps(disk), (std::vector<int64_t>{4, 8}));
}

// The job's folder swapped for a link to a folder of the attacker's choosing:
// no step is written there, and retention deletes nothing in it.
TEST(MemoryTierSkipTest, ALinkedJobFolderIsNeverWrittenOrPrunedThrough) {
  const std::string disk = NewDir("link_disk"), root = NewDir("link_root"), victim = NewDir("link_victim");
  auto job = ParseJobConfig(Yaml(), "job.yaml", Sets(disk, root));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string job_dir = MemoryCheckpointJobDir(*job);
  fs::create_directories(victim + "/" + StepDirName(1));
  std::ofstream(victim + "/" + StepDirName(1) + "/keep") << "the victim's";
  fs::create_directory_symlink(victim, job_dir);
  const Outcome o = Train(disk, root);
  ExpectEverySkipped(o, job_dir + " is a symbolic link");
  EXPECT_TRUE(fs::exists(victim + "/" + StepDirName(1) + "/keep"));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(victim)) entries += e.path().filename() != StepDirName(1);
  EXPECT_EQ(entries, 0) << "a step was written through the link";
}

// The tier's own folders and files: 0700 and 0600 (nobody else may read the
// model's state), and steps are taken there when the folder is the user's.
TEST(MemoryTierSkipTest, MemoryFoldersAre0700AndFiles0600) {
  const std::string disk = NewDir("mode_disk"), base = NewDir("mode_root");
  const std::string root = base + "/shardd-test";  // made by the tier
  const Outcome o = Train(disk, root, /*stop_after=*/3);  // memory steps 2 and 3 kept, no disk step yet
  EXPECT_EQ(o.skips, (std::vector<int>{0, 0}));
  EXPECT_TRUE(o.skipped.empty());
  auto job = ParseJobConfig(Yaml(), "job.yaml", Sets(disk, root));
  ASSERT_TRUE(job.ok());
  const std::string job_dir = MemoryCheckpointJobDir(*job);
  auto mode = [](const fs::path& p) {
    struct stat st;
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(root), 0700u);
  EXPECT_EQ(mode(job_dir), 0700u);
  auto steps = ListSteps(job_dir);
  ASSERT_TRUE(steps.ok());
  std::vector<int64_t> committed;
  for (const auto& s : *steps) {
    if (s.committed) committed.push_back(s.step);
    EXPECT_EQ(mode(s.dir), 0700u) << s.dir;
    for (const auto& f : fs::directory_iterator(s.dir)) EXPECT_EQ(mode(f.path()), 0600u) << f.path();
  }
  EXPECT_EQ(committed, (std::vector<int64_t>{2, 3}));
}

}  // namespace
}  // namespace shard
