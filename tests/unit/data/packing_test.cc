// Packing as pure functions: rows filled in sampler order, positions restarting
// per sample, segment ids, targets only where the mask says, padding, over-long
// samples truncated or dropped, the cursor advance.
#include <gtest/gtest.h>

#include "shard/data/packing.h"

namespace shard {
namespace {

// In-memory samples: sample s has tokens 100*s + i; mask set from `prompt` on.
struct Samples {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::vector<uint8_t>> mask;
  void Add(int length, int prompt) {
    const int s = static_cast<int>(tokens.size());
    tokens.emplace_back();
    mask.emplace_back();
    for (int i = 0; i < length; ++i) {
      tokens.back().push_back(100 * (s + 1) + i);
      mask.back().push_back(i >= prompt ? 1 : 0);
    }
  }
  SampleView View(int64_t s) const { return {tokens[s].data(), mask[s].data(), static_cast<int64_t>(tokens[s].size())}; }
  std::function<SampleView(int64_t)> Viewer() const {
    return [this](int64_t s) { return View(s); };
  }
};

std::function<int64_t(int64_t)> Identity(int64_t n) {
  return [n](int64_t pos) { return pos % n; };
}

struct Row {
  std::vector<int32_t> tokens, targets, positions, segments;
};
Row Fill(const std::vector<PackedSpan>& spans, const PackingOptions& o, const Samples& s) {
  Row r;
  for (auto* v : {&r.tokens, &r.targets, &r.positions, &r.segments}) v->resize(o.seq_len);
  FillRow(spans, o, s.Viewer(), r.tokens.data(), r.targets.data(), r.positions.data(), r.segments.data());
  return r;
}

TEST(PackingTest, PacksGreedilyWithRestartingPositions) {
  Samples s;
  s.Add(4, 2);  // 3 positions
  s.Add(5, 1);  // 4 positions
  s.Add(6, 3);  // 5 positions: does not fit the rest of row 0 (10 - 7 = 3)
  s.Add(3, 1);  // 2 positions
  PackingOptions o;
  o.seq_len = 10;
  o.pad_id = 7;
  auto plan = PlanBatch(0, 2, o, 4, Identity(4), s.Viewer());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rows.size(), 2u);
  ASSERT_EQ(plan->rows[0].size(), 2u);
  ASSERT_EQ(plan->rows[1].size(), 3u);  // samples 2, 3 and (next epoch) 0 = 5 + 2 + 3 = 10: full
  EXPECT_EQ(plan->rows[1][2].sample, 0);
  EXPECT_EQ(plan->consumed, 5);
  EXPECT_EQ(plan->skipped, 0);
  EXPECT_EQ(plan->target_tokens, 2 + 4 + 3 + 2 + 2);
  EXPECT_EQ(plan->tokens, 3 + 4 + 5 + 2 + 3);

  const Row r = Fill(plan->rows[0], o, s);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{100, 101, 102, 200, 201, 202, 203, 7, 7, 7}));
  EXPECT_EQ(r.targets, (std::vector<int32_t>{-1, 102, 103, 201, 202, 203, 204, -1, -1, -1}));
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0, 1, 2}));
  EXPECT_EQ(r.segments, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2}));
  // No target ever crosses a boundary: a sample's last token is a target, never an input.
  for (int i = 0; i + 1 < 10; ++i)
    if (r.segments[i] != r.segments[i + 1]) {
      EXPECT_NE(r.targets[i], r.tokens[i + 1]);
    }
}

TEST(PackingTest, WithoutPackingOneSamplePerRowPadded) {
  Samples s;
  s.Add(4, 1);
  s.Add(3, 1);
  PackingOptions o;
  o.seq_len = 6;
  o.packing = false;
  auto plan = PlanBatch(0, 3, o, 2, Identity(2), s.Viewer());
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->consumed, 3);
  for (const auto& row : plan->rows) EXPECT_EQ(row.size(), 1u);
  const Row r = Fill(plan->rows[1], o, s);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{200, 201, 0, 0, 0, 0}));
  EXPECT_EQ(r.targets, (std::vector<int32_t>{201, 202, -1, -1, -1, -1}));
  EXPECT_EQ(r.segments, (std::vector<int32_t>{0, 0, 1, 1, 1, 1}));
}

TEST(PackingTest, OverlongSamplesTruncatedOrDropped) {
  Samples s;
  s.Add(12, 2);  // 11 positions > seq_len 8
  s.Add(4, 1);
  s.Add(20, 15);  // its targets start beyond seq_len + 1: nothing to learn after truncation
  PackingOptions o;
  o.seq_len = 8;
  auto plan = PlanBatch(0, 2, o, 3, Identity(3), s.Viewer());
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->rows[0].size(), 1u);
  EXPECT_EQ(plan->rows[0][0].take, 9) << "truncated to seq_len + 1 tokens";
  EXPECT_EQ(plan->rows[1][0].sample, 1);
  EXPECT_EQ(plan->rows[1].size(), 1u) << "sample 2 has no target within 9 tokens and is skipped, then sample 0 (8) does not fit";
  EXPECT_EQ(plan->skipped, 1);
  EXPECT_EQ(plan->consumed, 3);
  const Row r = Fill(plan->rows[0], o, s);
  EXPECT_EQ(r.targets.back(), 108);
  o.overlong = Overlong::kDrop;
  plan = PlanBatch(0, 1, o, 3, Identity(3), s.Viewer());
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->rows[0].size(), 2u) << "only sample 1 survives; it fills the row twice (two epochs)";
  EXPECT_EQ(plan->rows[0][0].sample, 1);
  EXPECT_EQ(plan->rows[0][1].sample, 1);
  EXPECT_EQ(plan->skipped, 5);
  EXPECT_EQ(plan->consumed, 7) << "the 8th position (sample 1 again) does not fit and opens the next batch";
}

TEST(PackingTest, FailsWhenNothingFits) {
  Samples s;
  s.Add(30, 25);
  PackingOptions o;
  o.seq_len = 8;
  auto plan = PlanBatch(0, 1, o, 1, Identity(1), s.Viewer());
  ASSERT_FALSE(plan.ok());
  // The data can never train at this seq_len: INVALID_ARGUMENT, which a
  // worker turns into its "can never run" exit (no restart is spent on it).
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseOverlong("wrap").ok());
}

TEST(PackingTest, PlanDependsOnlyOnCursor) {
  Samples s;
  for (int i = 0; i < 9; ++i) s.Add(3 + (i * 5) % 7, 1);
  PackingOptions o;
  o.seq_len = 12;
  // Planning step by step from the advancing cursor equals planning from a restored cursor.
  int64_t cursor = 0;
  std::vector<BatchPlan> plans;
  for (int step = 0; step < 5; ++step) {
    auto p = PlanBatch(cursor, 3, o, 9, Identity(9), s.Viewer());
    ASSERT_TRUE(p.ok());
    plans.push_back(*p);
    cursor += p->consumed;
  }
  auto again = PlanBatch(plans[0].consumed + plans[1].consumed, 3, o, 9, Identity(9), s.Viewer());
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->rows.size(), plans[2].rows.size());
  for (size_t r = 0; r < again->rows.size(); ++r)
    for (size_t k = 0; k < again->rows[r].size(); ++k) EXPECT_EQ(again->rows[r][k].sample, plans[2].rows[r][k].sample);
}

}  // namespace
}  // namespace shard
