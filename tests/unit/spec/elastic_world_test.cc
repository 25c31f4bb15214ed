// Elastic restarts' decision (shard/spec/elastic_world.h): given
// restart.min_world_size, the sharding, the batch and the ranks available,
// the next attempt's world size or a one-line refusal; the job as a worker
// trains it at that size; restart.* keys and their validation.
#include "shard/spec/elastic_world.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shard {
namespace {

// hybrid_shard over 8 ranks in groups of 2, global batch 16 of micro 2 (one
// micro-batch per rank at full size), launched externally.
JobConfig Job(const std::vector<std::string>& sets = {}) {
  const std::string yaml =
      "name: el\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n"
      "train: {global_batch: 16, micro_batch: 2}\n"
      "parallel: {strategy: hybrid_shard, world_size: 8, shard_group_size: 2}\n"
      "resources: {launcher: external, device: cpu}\n"
      "restart: {min_world_size: 2, elastic_wait_s: 5}\n";
  auto job = ParseJobConfig(yaml, "job.yaml", sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : JobConfig{};
}

TEST(ElasticWorldTest, KeysAreReadAndDefaultToOff) {
  JobConfig j = Job();
  EXPECT_EQ(j.restart.min_world_size, 2);
  EXPECT_DOUBLE_EQ(j.restart.elastic_wait_s, 5);
  EXPECT_TRUE(ElasticEnabled(j));
  auto plain = ParseJobConfig("name: p\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n"
                              "parallel: {world_size: 2}\ntrain: {global_batch: 4, micro_batch: 2}\n",
                              "job.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->restart.min_world_size, 0);
  EXPECT_DOUBLE_EQ(plain->restart.elastic_wait_s, 60);
  EXPECT_EQ(MinWorldSize(*plain), 2);
  EXPECT_FALSE(ElasticEnabled(*plain));
}

TEST(ElasticWorldTest, AllowedSizesFollowTheShardGroupAndTheBatch) {
  // Multiples of 2 that divide 16 / 2 = 8 micro-batches: 8, 4, 2 (6 leaves a remainder).
  EXPECT_EQ(AllowedWorldSizes(Job()), (std::vector<int>{8, 4, 2}));
  EXPECT_NE(WhyNotWorldSize(Job(), 6).find("train.global_batch 16 is not a multiple of micro_batch 2 x 6"),
            std::string::npos);
  EXPECT_NE(WhyNotWorldSize(Job(), 3).find("shard_group_size 2"), std::string::npos);
  EXPECT_NE(WhyNotWorldSize(Job({"restart.min_world_size=4"}), 2).find("below restart.min_world_size 4"),
            std::string::npos);
  // full_shard with global batch 48: any size whose micro-batches divide 24.
  JobConfig fs = Job({"parallel.strategy=full_shard", "train.global_batch=48"});
  EXPECT_EQ(AllowedWorldSizes(fs), (std::vector<int>{8, 6, 4, 3, 2}));
  EXPECT_EQ(MicroBatchesPerStep(fs, 8), 3);
  EXPECT_EQ(MicroBatchesPerStep(fs, 6), 4);
}

TEST(ElasticWorldTest, TheLargestAllowedSizeThatTheAvailableRanksCover) {
  const JobConfig j = Job();
  EXPECT_EQ(DecideElasticWorld(j, 8).world, 8);
  EXPECT_EQ(DecideElasticWorld(j, 7).world, 4);  // 6 is not allowed
  EXPECT_EQ(DecideElasticWorld(j, 5).world, 4);
  EXPECT_EQ(DecideElasticWorld(j, 3).world, 2);
  EXPECT_EQ(DecideElasticWorld(j, 2).world, 2);
  EXPECT_EQ(MicroBatchesPerStep(j, 8), 1);
  EXPECT_EQ(MicroBatchesPerStep(j, 2), 4);
}

TEST(ElasticWorldTest, TooFewRanksIsOneLineRefusal) {
  const ElasticDecision d = DecideElasticWorld(Job(), 1);
  EXPECT_EQ(d.world, 0);
  EXPECT_EQ(d.refusal,
            "1 of 8 rank(s) available, fewer than the smallest world size the job allows (2: "
            "restart.min_world_size 2, its sharding and train.global_batch)");
  EXPECT_EQ(d.refusal.find('\n'), std::string::npos);
  const ElasticDecision off = DecideElasticWorld(Job({"restart.min_world_size=0"}), 4);
  EXPECT_EQ(off.world, 0);
  EXPECT_NE(off.refusal.find("elastic restarts are off"), std::string::npos);
}

TEST(ElasticWorldTest, TheWorkersJobAtTheGivenSize) {
  auto at = JobAtWorldSize(Job(), 4);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->parallel.world_size, 4);
  EXPECT_EQ(at->train.global_batch, 16);  // kept: more micro-batches per rank instead
  EXPECT_TRUE(at->Validate().ok());
  auto bad = JobAtWorldSize(Job(), 6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cannot train job el on 6 of 8 ranks"), std::string::npos);
}

TEST(ElasticWorldTest, ValidationNamesTheKey) {
  auto parse = [](const std::vector<std::string>& sets) {
    return ParseJobConfig("name: el\nmodel: {preset: tiny}\ndata: {tokens: t.u32, seq_len: 16}\n"
                          "train: {global_batch: 16, micro_batch: 2}\n"
                          "parallel: {strategy: hybrid_shard, world_size: 8, shard_group_size: 2}\n"
                          "resources: {launcher: external}\n",
                          "job.yaml", sets)
        .status();
  };
  EXPECT_TRUE(parse({"restart.min_world_size=2"}).ok());
  EXPECT_TRUE(parse({"restart.min_world_size=8"}).ok());
  EXPECT_NE(parse({"restart.min_world_size=9"}).message().find("restart.min_world_size 9 exceeds parallel.world_size 8"),
            std::string::npos);
  EXPECT_NE(parse({"restart.min_world_size=-1"}).message().find("restart.min_world_size must be >= 1"),
            std::string::npos);
  EXPECT_NE(parse({"restart.elastic_wait_s=0"}).message().find("restart.elastic_wait_s"), std::string::npos);
  // 7 ranks or more: only 8 itself is allowed, nothing to shrink to.
  EXPECT_NE(parse({"restart.min_world_size=7"}).message().find("no world size from 7 to 7 fits"), std::string::npos);
  // Local GPU ranks may lose a device (LocalLauncher::Capacity); CPU ranks
  // and one pinned device for every rank never lack places.
  EXPECT_TRUE(parse({"restart.min_world_size=2", "resources.launcher=local"}).ok());
  EXPECT_TRUE(parse({"restart.min_world_size=2", "resources.launcher=local", "resources.device=cuda"}).ok());
  EXPECT_NE(parse({"restart.min_world_size=2", "resources.launcher=local", "resources.device=cpu"})
                .message()
                .find("CPU ranks of the local launcher keep their slots through restarts and are never short of "
                      "places (resources.device cpu)"),
            std::string::npos);
  EXPECT_NE(parse({"restart.min_world_size=2", "resources.launcher=local", "resources.device=cuda:1"})
                .message()
                .find("every rank shares resources.device cuda:1, so fewer ranks need no fewer GPUs"),
            std::string::npos);
  EXPECT_NE(parse({"restart.min_world_size=2", "resources.launcher=kubernetes", "resources.kubernetes.image=i",
                   "resources.kubernetes.pvc=p"})
                .message()
                .find("needs resources.launcher external or slurm (Kubernetes says a pod is unschedulable"),
            std::string::npos);
  EXPECT_TRUE(parse({"restart.min_world_size=2", "resources.launcher=slurm"}).ok());
  // Two nodes of 4 GPU tasks: whole nodes only, so 4 is the one smaller size.
  EXPECT_TRUE(parse({"restart.min_world_size=4", "resources.launcher=slurm", "resources.slurm.gpus_per_node=4"}).ok());
  EXPECT_NE(parse({"restart.min_world_size=6", "resources.launcher=slurm", "resources.slurm.gpus_per_node=4"})
                .message()
                .find("no world size from 6 to 7 fits this job (resources.slurm runs 4 task(s) per node: a "
                      "multiple of 4)"),
            std::string::npos);
}

TEST(ElasticWorldTest, SlurmResizesInWholeNodesOfTheJobsTasks) {
  JobConfig gpus = Job({"resources.launcher=slurm", "resources.slurm.gpus_per_node=4"});
  EXPECT_EQ(ElasticRankUnit(gpus), 4);
  EXPECT_EQ(AllowedWorldSizes(gpus), (std::vector<int>{8, 4}));
  EXPECT_EQ(DecideElasticWorld(gpus, 7).world, 4);
  auto at = JobAtWorldSize(gpus, 4);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->resources.slurm.nodes, 1);
  EXPECT_EQ(at->resources.slurm.tasks_per_node, 4);
  EXPECT_TRUE(at->resources.slurm.Validate(4).ok());
  // CPU workers on one node: any allowed size, the node's task count follows.
  JobConfig one_node = Job({"resources.launcher=slurm"});
  EXPECT_EQ(ElasticRankUnit(one_node), 1);
  EXPECT_EQ(AllowedWorldSizes(one_node), (std::vector<int>{8, 4, 2}));
  at = JobAtWorldSize(one_node, 2);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->resources.slurm.nodes, 0);
  EXPECT_EQ(at->resources.slurm.TasksPerNode(2), 2);
}

}  // namespace
}  // namespace shard
