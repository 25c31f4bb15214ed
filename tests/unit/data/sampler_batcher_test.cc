// The sampler (a seeded permutation per epoch over a global cursor) and the
// SftBatcher on a prepared dataset: coverage without repeats within an epoch,
// the same global batches for world sizes 1, 2 and 3 (ranks take disjoint rows
// whose concatenation is the W=1 batch), the global target count every rank
// normalises by, and an exact continuation from a restored cursor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "shard/data/prepare_sft.h"
#include "shard/data/sft_batcher.h"
#include "tests/unit/data/data_test_util.h"

namespace shard {
namespace {

TEST(SamplerTest, EachEpochCoversEverySampleOnce) {
  for (int64_t n : {1, 2, 7, 100, 1000}) {
    for (uint64_t seed : {0ull, 1ull, 1234ull}) {
      Sampler s(n, /*shuffle=*/true, seed);
      std::vector<int64_t> prev;
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<int64_t> order;
        std::set<int64_t> seen;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t x = s.At(epoch * n + i);
          ASSERT_GE(x, 0);
          ASSERT_LT(x, n);
          EXPECT_TRUE(seen.insert(x).second) << "sample " << x << " repeats in epoch " << epoch << " (n=" << n << ")";
          order.push_back(x);
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
        if (n >= 100 && epoch > 0) {
          EXPECT_NE(order, prev) << "epochs should be reshuffled";
        }
        prev = order;
      }
    }
  }
  Sampler plain(5, /*shuffle=*/false, 9);
  for (int64_t p = 0; p < 12; ++p) EXPECT_EQ(plain.At(p), p % 5);
  // Positions are independent of the order they are asked in (and of who asks).
  Sampler a(50, true, 3), b(50, true, 3);
  std::vector<int64_t> fwd, back;
  for (int64_t p = 0; p < 150; ++p) fwd.push_back(a.At(p));
  for (int64_t p = 149; p >= 0; --p) back.push_back(b.At(p));
  std::reverse(back.begin(), back.end());
  EXPECT_EQ(fwd, back);
}

TEST(SamplerTest, RankSlicesPartitionTheGlobalBatch) {
  for (int64_t g : {1, 5, 6, 32}) {
    for (int w = 1; w <= 4; ++w) {
      int64_t next = 0;
      for (int r = 0; r < w; ++r) {
        const BatchSlice s = RankSlice(g, r, w);
        EXPECT_EQ(s.begin, next);
        EXPECT_GE(s.end, s.begin);
        next = s.end;
      }
      EXPECT_EQ(next, g);
    }
  }
}

class BatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_data::TempDir("batcher");
    PrepareSftOptions o;
    o.input = dir_ + "/rows.jsonl";
    std::ofstream f(o.input);
    for (int i = 0; i < 57; ++i)  // replies of 1..13 characters, prompts of 3..9
      f << R"({"prompt":")" << std::string(3 + i % 7, 'a' + i % 26) << R"(","response":")"
        << std::string(1 + (i * 5) % 13, 'A' + i % 26) << "\"}\n";
    f.close();
    o.out = dir_ + "/ds";
    o.seq_len = 32;
    ASSERT_TRUE(PrepareSftData(o).ok());
    auto ds = PreparedDataset::Open(o.out);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    data_ = std::make_unique<PreparedDataset>(std::move(*ds));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct StepOut {
    std::vector<int32_t> tokens, targets, positions, segments;
    int64_t consumed = 0, target_tokens = 0;
  };
  // Runs `steps` steps as rank `rank` of `world` (its own sampler and batcher)
  // from `cursor`, in micro-batches of `micro` rows.
  std::vector<StepOut> RunRank(int rank, int world, int steps, int64_t cursor, bool packing, int64_t micro) {
    Sampler sampler(data_->num_samples(), true, 42);
    SftBatcherOptions o;
    o.global_batch = 6;
    o.packing.seq_len = 32;
    o.packing.packing = packing;
    auto b = SftBatcher::Create(data_.get(), &sampler, o);
    EXPECT_TRUE(b.ok());
    std::vector<StepOut> out;
    const int64_t T = 32;
    for (int s = 0; s < steps; ++s) {
      auto plan = b->PlanGlobalBatch(cursor);
      EXPECT_TRUE(plan.ok()) << plan.status().ToString();
      StepOut so;
      so.consumed = plan->consumed;
      so.target_tokens = plan->target_tokens;
      const BatchSlice mine = b->RankRows(rank, world);
      for (int64_t row = mine.begin; row < mine.end; row += micro) {
        const int64_t n = std::min(micro, mine.end - row);
        std::vector<int32_t> t(n * T), g(n * T), p(n * T), sg(n * T);
        b->FillRows(*plan, row, n, t.data(), g.data(), p.data(), sg.data());
        so.tokens.insert(so.tokens.end(), t.begin(), t.end());
        so.targets.insert(so.targets.end(), g.begin(), g.end());
        so.positions.insert(so.positions.end(), p.begin(), p.end());
        so.segments.insert(so.segments.end(), sg.begin(), sg.end());
      }
      out.push_back(std::move(so));
      cursor += plan->consumed;
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<PreparedDataset> data_;
};

TEST_F(BatcherTest, SameGlobalBatchesForWorldSizes123) {
  for (bool packing : {true, false}) {
    const auto ref = RunRank(0, 1, 12, 0, packing, 6);
    int64_t targets_seen = 0;
    for (const auto& s : ref) {
      int64_t t = 0;
      for (int32_t x : s.targets) t += x >= 0;
      EXPECT_EQ(t, s.target_tokens) << "the plan's count is what the rows hold";
      targets_seen += t;
    }
    EXPECT_GT(targets_seen, 0);
    for (int world : {2, 3}) {
      std::vector<std::vector<StepOut>> ranks;
      for (int r = 0; r < world; ++r) ranks.push_back(RunRank(r, world, 12, 0, packing, 1));
      for (int step = 0; step < 12; ++step) {
        StepOut joined;
        for (int r = 0; r < world; ++r) {
          const StepOut& s = ranks[r][step];
          EXPECT_EQ(s.consumed, ref[step].consumed) << "world " << world << " rank " << r;
          EXPECT_EQ(s.target_tokens, ref[step].target_tokens) << "every rank normalises by the same global count";
          joined.tokens.insert(joined.tokens.end(), s.tokens.begin(), s.tokens.end());
          joined.targets.insert(joined.targets.end(), s.targets.begin(), s.targets.end());
          joined.positions.insert(joined.positions.end(), s.positions.begin(), s.positions.end());
          joined.segments.insert(joined.segments.end(), s.segments.begin(), s.segments.end());
        }
        EXPECT_EQ(joined.tokens, ref[step].tokens) << "world " << world << " step " << step << " packing " << packing;
        EXPECT_EQ(joined.targets, ref[step].targets);
        EXPECT_EQ(joined.positions, ref[step].positions);
        EXPECT_EQ(joined.segments, ref[step].segments);
      }
    }
  }
}

TEST_F(BatcherTest, EpochCoverageAndResume) {
  // Without packing every row is one sample: one epoch of positions covers each sample once.
  Sampler sampler(data_->num_samples(), true, 42);
  SftBatcherOptions o;
  o.global_batch = 6;
  o.packing.seq_len = 32;
  o.packing.packing = false;
  auto b = SftBatcher::Create(data_.get(), &sampler, o);
  ASSERT_TRUE(b.ok());
  std::multiset<int64_t> seen;
  int64_t cursor = 0;
  while (cursor + 6 <= data_->num_samples()) {
    auto plan = b->PlanGlobalBatch(cursor);
    ASSERT_TRUE(plan.ok());
    for (const auto& row : plan->rows) seen.insert(row[0].sample);
    cursor += plan->consumed;
  }
  for (int64_t s : seen) EXPECT_EQ(seen.count(s), 1u) << "sample " << s << " repeats within an epoch";
  EXPECT_EQ(static_cast<int64_t>(seen.size()), cursor);

  // A run restored from the cursor after step 4 continues exactly (any world size).
  const auto full = RunRank(0, 1, 8, 0, true, 6);
  int64_t c4 = 0;
  for (int s = 0; s < 4; ++s) c4 += full[s].consumed;
  const auto resumed = RunRank(1, 2, 4, c4, true, 6);
  for (int s = 0; s < 4; ++s) {
    const auto& want = full[4 + s].tokens;
    EXPECT_EQ(resumed[s].tokens, std::vector<int32_t>(want.begin() + 3 * 32, want.end())) << "step " << 4 + s;
  }
  // Rows past the global batch are all padding.
  auto plan = b->PlanGlobalBatch(0);
  std::vector<int32_t> t(32), g(32), p(32), sg(32);
  b->FillRows(*plan, 6, 1, t.data(), g.data(), p.data(), sg.data());
  for (int32_t x : g) EXPECT_EQ(x, -1);
  Sampler wrong(3, true, 1);
  EXPECT_FALSE(SftBatcher::Create(data_.get(), &wrong, o).ok());
}

}  // namespace
}  // namespace shard
