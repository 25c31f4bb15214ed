// Shard layout arithmetic (equal, aligned, padded shards) and each strategy's
// group shapes: pure functions of shard/spec.
#include "shard/spec/shard_layout.h"

#include <gtest/gtest.h>

namespace shard {
namespace {

TEST(ShardLayoutTest, PadsToAlignedEqualShards) {
  auto l = ComputeShardLayout(10, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->shard_numel, 4);  // ceil(10/3)=4, already a multiple of 4
  EXPECT_EQ(l->padded, 12);
  EXPECT_EQ(l->begin(2), 8);
  EXPECT_EQ(l->end(2), 12);
  EXPECT_EQ(l->real_in(0), 4);
  EXPECT_EQ(l->real_in(2), 2);

  auto m = ComputeShardLayout(1001, 4);
  EXPECT_EQ(m->shard_numel, 252);  // ceil(1001/4)=251 -> 252
  EXPECT_EQ(m->padded, 1008);
  int64_t real = 0;
  for (int r = 0; r < 4; ++r) real += m->real_in(r);
  EXPECT_EQ(real, 1001);

  auto one = ComputeShardLayout(7, 1);
  EXPECT_EQ(one->shard_numel, 8);
  auto tiny = ComputeShardLayout(3, 8);  // more shards than elements
  EXPECT_EQ(tiny->shard_numel, 4);
  EXPECT_EQ(tiny->real_in(0), 3);
  EXPECT_EQ(tiny->real_in(5), 0);
  auto empty = ComputeShardLayout(0, 2);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->real_in(0), 0);
}

TEST(ShardLayoutTest, RefusesBadInput) {
  EXPECT_FALSE(ComputeShardLayout(10, 0).ok());
  EXPECT_FALSE(ComputeShardLayout(-1, 2).ok());
  EXPECT_FALSE(ComputeShardLayout(10, 2, 0).ok());
}

TEST(GroupShapeTest, StrategiesMapToShardAndReplicaGroups) {
  EXPECT_EQ(GroupShapeFor(ShardStrategy::kFullShard, 4, 0)->shard_size, 4);
  EXPECT_EQ(GroupShapeFor(ShardStrategy::kNoShard, 4, 0)->replicas, 4);
  auto h = GroupShapeFor(ShardStrategy::kHybridShard, 4, 2);
  EXPECT_EQ(h->shard_size, 2);
  EXPECT_EQ(h->replicas, 2);
  EXPECT_FALSE(GroupShapeFor(ShardStrategy::kHybridShard, 4, 3).ok());
  EXPECT_FALSE(ParseEnum(kShardStrategyNames, "zero9").ok());
  EXPECT_EQ(*ParseEnum(kShardStrategyNames, "hybrid_shard"), ShardStrategy::kHybridShard);
  EXPECT_STREQ(StrategyName(ShardStrategy::kShardGradOp), "shard_grad_op");
}

}  // namespace
}  // namespace shard
