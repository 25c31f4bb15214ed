// preference: jobs through the Trainer (ranks as threads): the reference pass
// makes the first DPO step exactly log 2 with zero rewards (policy = its
// reference), DPO learns to prefer the chosen replies, world size and
// accumulation do not change a step, the reference is computed once and read
// back by a resumed attempt (which then matches the uninterrupted run
// bitwise), and ORPO (no reference) reports its NLL.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>

#include "shard/common/file_util.h"
#include "shard/data/reference_file.h"
#include "tests/unit/train/sft_test_util.h"
#include "tests/unit/train/trainer_ranks.h"

namespace shard {
namespace {

using sft_testing::MaxAbsDiff;
using sft_testing::NewDir;
namespace fs = std::filesystem;

// "rev abc=" → chosen "cba", rejected a plausible wrong answer (the word as it was).
std::string WritePairs(const std::string& path, int rows) {
  std::mt19937 rng(3);
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) {
    std::string s;
    for (int n = 3 + static_cast<int>(rng() % 4); n > 0; --n) s += static_cast<char>('a' + rng() % 8);
    std::string rev(s.rbegin(), s.rend());
    std::string wrong = rev == s ? s + "a" : s;
    f << "{\"prompt\":\"rev " << s << "=\",\"chosen\":\"" << rev << "\",\"rejected\":\"" << wrong << "\"}\n";
  }
  return path;
}

std::string Job(const std::string& jsonl, const std::string& ckpt, const std::string& preference) {
  return "name: pref\nmodel: {preset: tiny}\n"
         "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 32}\n"
         "train: {steps: 4, global_batch: 8, micro_batch: 4, lr: 3.0e-3, warmup_steps: 0, schedule: constant, "
         "precision: fp32, log_every: 1000}\n"
         "checkpoint: {dir: " + ckpt + ", every_steps: 0, async: false, resume: auto}\n"
         "resources: {device: cpu}\n" + preference;
}

struct PrefRun {
  Status status;
  std::map<int64_t, StepMetrics> steps;  // rank 0's
  std::vector<std::vector<float>> params;
  int64_t start_step = 0;
};

PrefRun Train(const std::string& yaml, int world, std::vector<std::string> sets, int64_t stop_after = -1) {
  sets.push_back("parallel.world_size=" + std::to_string(world));
  PrefRun out;
  std::mutex mu;
  std::vector<Status> status(world);
  Status created = testing_ranks::OnTrainerRanks(yaml, world, sets, [&](Trainer& tr, int r) {
    if (r == 0) out.start_step = tr.step();
    const int64_t last = stop_after >= 0 ? stop_after : tr.total_steps();
    while (tr.step() < last) {
      auto m = tr.Step();
      if (!m.ok()) {
        status[r] = m.status();
        return;
      }
      if (r == 0) out.steps[m->step] = *m;
    }
    std::vector<std::vector<float>> params(tr.layout().num_units());
    for (int u = 0; u < tr.layout().num_units() && status[r].ok(); ++u) status[r] = tr.UnitParams(u, &params[u]);
    if (status[r].ok() && tr.checkpointer()) status[r] = tr.checkpointer()->Wait();
    if (r == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out.params = std::move(params);
    }
  });
  out.status = created;
  for (const Status& s : status)
    if (out.status.ok() && !s.ok()) out.status = s;
  return out;
}

std::vector<fs::path> ReferenceFiles(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".ref-") != std::string::npos) out.push_back(e.path());
  return out;
}

TEST(PreferenceTrain, DpoStartsAtLog2AndLearnsToPreferTheChosenReply) {
  const std::string dir = NewDir("pref_dpo");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 64);
  PrefRun r = Train(Job(jsonl, dir + "/ckpt", "preference: {method: dpo, beta: 0.5}\n"), 1, {"train.steps=12"});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const StepMetrics& first = r.steps.at(1);
  EXPECT_EQ(first.pairs, 8);
  EXPECT_EQ(first.samples, 8);
  // The policy is its reference at step 1: z = 0 for every pair.
  EXPECT_NEAR(first.loss, std::log(2.0), 1e-6);
  EXPECT_NEAR(first.rewards_chosen, 0, 1e-6);
  EXPECT_NEAR(first.rewards_margins, 0, 1e-6);
  EXPECT_LT(first.logps_chosen, 0);
  EXPECT_GT(first.grad_norm, 0);
  const StepMetrics& last = r.steps.at(12);
  EXPECT_LT(last.loss, 0.6) << "DPO did not learn";
  EXPECT_GT(last.rewards_margins, 0.1);
  EXPECT_GE(last.rewards_accuracies, 0.75);
  EXPECT_EQ(ReferenceFiles(dir + "/ckpt/pref/data").size(), 1u);
  fs::remove_all(dir);
}

// 8 pairs as 1 rank x 8 or 2 ranks x 2 micro-batches x 2: the same steps (up
// to fp32 summation order), for each method.
TEST(PreferenceTrain, WorldSizeAndAccumulationDoNotChangeTheStep) {
  const std::string dir = NewDir("pref_world");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 40);
  for (const std::string method : {"dpo, label_smoothing: 0.1", "ipo", "orpo, orpo_lambda: 0.5"}) {
    SCOPED_TRACE(method);
    const std::string pref = "preference: {method: " + method + "}\n";
    const std::string tag = method.substr(0, method.find(','));
    PrefRun one = Train(Job(jsonl, dir + "/a" + tag, pref), 1, {"train.steps=3", "train.micro_batch=8"});
    PrefRun two = Train(Job(jsonl, dir + "/b" + tag, pref), 2, {"train.steps=3", "train.micro_batch=2"});
    ASSERT_TRUE(one.status.ok()) << one.status.ToString();
    ASSERT_TRUE(two.status.ok()) << two.status.ToString();
    for (int64_t s = 1; s <= 3; ++s) {
      EXPECT_NEAR(one.steps.at(s).loss, two.steps.at(s).loss, 1e-5 * std::abs(one.steps.at(s).loss) + 1e-7)
          << "step " << s;
      EXPECT_NEAR(one.steps.at(s).rewards_margins, two.steps.at(s).rewards_margins, 1e-5) << "step " << s;
      EXPECT_NEAR(one.steps.at(s).logps_chosen, two.steps.at(s).logps_chosen,
                  1e-5 * std::abs(one.steps.at(s).logps_chosen)) << "step " << s;
    }
    // The gradient's scale: each pair weighs 1/8 on every split (AdamW
    // would hide a wrong scale from the losses; the norm does not).
    EXPECT_NEAR(one.steps.at(1).grad_norm, two.steps.at(1).grad_norm, 1e-4 * one.steps.at(1).grad_norm);
    if (tag == "orpo") EXPECT_GT(one.steps.at(1).nll, 0);
    // Not rewards/accuracies: at step 1 the rewards are fp32 noise around 0
    // (policy = reference), so which side wins a tie depends on summation
    // order. For the same reason the weights agree to AdamW's step size, not
    // fp32 noise: where a pair's two replies give nearly equal gradients the
    // difference is noise, and AdamW's first step moves by ±lr whatever its
    // size. The losses above (steps 2 and 3 follow from the updates) are the
    // check that each pair's weight is 1/(the step's pairs) on every split.
    EXPECT_LT(MaxAbsDiff(one.params, two.params), 3e-3);
  }
  fs::remove_all(dir);
}

// Stopped after step 3 (checkpoint at 2), resumed: the reference file is read
// back, not recomputed, and the resumed steps are the uninterrupted run's.
TEST(PreferenceTrain, ReferenceIsComputedOnceAndResumeIsBitwise) {
  const std::string dir = NewDir("pref_resume");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 40);
  const std::string pref = "preference: {method: dpo}\n";
  const std::vector<std::string> ck = {"checkpoint.every_steps=2", "train.steps=6"};
  PrefRun straight = Train(Job(jsonl, dir + "/straight", pref), 2, ck);
  ASSERT_TRUE(straight.status.ok()) << straight.status.ToString();
  const std::string yaml = Job(jsonl, dir + "/stop", pref);
  PrefRun first = Train(yaml, 2, ck, /*stop_after=*/3);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  auto refs = ReferenceFiles(dir + "/stop/pref/data");
  ASSERT_EQ(refs.size(), 1u);
  const auto written = fs::last_write_time(refs[0]);
  PrefRun resumed = Train(yaml, 2, ck);
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.ToString();
  EXPECT_EQ(resumed.start_step, 2);
  EXPECT_EQ(fs::last_write_time(refs[0]), written) << "the resumed attempt recomputed the reference";
  EXPECT_EQ(ReferenceFiles(dir + "/stop/pref/data").size(), 1u);
  for (int64_t s = 3; s <= 6; ++s) EXPECT_EQ(resumed.steps.at(s).loss, straight.steps.at(s).loss) << "step " << s;
  EXPECT_EQ(MaxAbsDiff(straight.params, resumed.params), 0.0);
  fs::remove_all(dir);
}

// Issue 39 item 8: values changed with the checksum recomputed were used on a
// fresh start (step-1 DPO loss 0.9741, not log 2); a FIFO at the path hung
// the attempt. Now the first pairs are checked against the starting weights
// (the file is recomputed, with a warning), and the reader refuses a FIFO.
TEST(PreferenceTrain, AForgedOrFifoReferenceIsRecomputedAndStepOneIsLog2) {
  const std::string dir = NewDir("pref_forged");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 24);
  const std::string yaml = Job(jsonl, dir + "/ckpt", "preference: {method: dpo, beta: 0.5}\n");
  const std::vector<std::string> fresh = {"train.steps=1", "checkpoint.resume=none"};
  PrefRun first = Train(yaml, 1, fresh);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  auto refs = ReferenceFiles(dir + "/ckpt/pref/data");
  ASSERT_EQ(refs.size(), 1u);
  const fs::path file = refs[0];
  auto bytes = ReadFileToString(file.string());
  ASSERT_TRUE(bytes.ok());
  const std::string original = *bytes;
  std::vector<double> v((original.size() - 24) / 8);
  std::memcpy(v.data(), original.data() + 16, v.size() * 8);
  for (size_t k = 0; k < v.size(); k += 2) v[k] -= 1.0;  // every chosen reply: a consistent forgery
  ASSERT_TRUE(WriteFileAtomic(file.string(), EncodeReferenceFile(v)).ok());
  PrefRun forged = Train(yaml, 1, fresh);
  ASSERT_TRUE(forged.status.ok()) << forged.status.ToString();
  EXPECT_NEAR(forged.steps.at(1).loss, std::log(2.0), 1e-6) << "the forged reference was used";
  EXPECT_NEAR(forged.steps.at(1).rewards_chosen, 0, 1e-6);
  EXPECT_TRUE(*ReadFileToString(file.string()) == original) << "the reference was not recomputed";

  // A FIFO at the path: refused without blocking, then recomputed in its place.
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  auto run = std::async(std::launch::async, [&] { return Train(yaml, 1, fresh); });
  if (run.wait_for(std::chrono::seconds(300)) != std::future_status::ready) {
    ADD_FAILURE() << "the trainer blocked on a FIFO at " << file;
    const int w = ::open(file.c_str(), O_WRONLY);  // let the blocked reader see EOF
    if (w >= 0) ::close(w);
  }
  PrefRun fifo = run.get();
  ASSERT_TRUE(fifo.status.ok()) << fifo.status.ToString();
  EXPECT_NEAR(fifo.steps.at(1).loss, std::log(2.0), 1e-6);
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(file)));
  fs::remove_all(dir);
}

// TRL's metric names reach TensorBoard (rank 0's event file in the run dir).
TEST(PreferenceTrain, TensorBoardCarriesTrlsTags) {
  const std::string dir = NewDir("pref_tb");
  const std::string jsonl = WritePairs(dir + "/pairs.jsonl", 16);
  DistContext base;
  base.tensorboard = true;
  Status st = testing_ranks::OnTrainerRanks(
      Job(jsonl, dir + "/ckpt", "preference: {method: orpo}\n"), 1, {"train.steps=2"},
      [&](Trainer& tr, int) { ASSERT_TRUE(tr.Run().ok()); }, base);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::string events;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/ckpt"))
    if (e.path().filename().string().rfind("events.out.tfevents", 0) == 0) {
      std::ifstream f(e.path(), std::ios::binary);
      events.assign(std::istreambuf_iterator<char>(f), {});
    }
  ASSERT_FALSE(events.empty()) << "no event file under " << dir;
  for (const char* tag : {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                          "logps/rejected", "nll"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shard
