// ResolvePlacement: a worker's rank from --rank, else srun's SLURM_PROCID,
// else --node-rank or a Kubernetes Indexed Job's JOB_COMPLETION_INDEX times
// --nproc-per-node plus its local index, else 0. The environment is a map
// here, never the process's own. Malformed values name the variable.
#include "worker/worker_env.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardd {
namespace {

using shard::StatusCode;

// A lookup over `vars` (it owns them, so a temporary map is fine).
EnvLookup Env(std::map<std::string, std::string> vars = {}) {
  auto owned = std::make_shared<const std::map<std::string, std::string>>(std::move(vars));
  return [owned](const char* name) -> const char* {
    auto it = owned->find(name);
    return it == owned->end() ? nullptr : it->second.c_str();
  };
}

const EnvLookup kSrun =
    Env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "5"}, {"SLURM_JOB_ID", "4242"}});

TEST(ResolvePlacementTest, RankFlagWinsOverEverything) {
  const EnvLookup env = Env({{"SLURM_PROCID", "5"}, {"JOB_COMPLETION_INDEX", "3"}});
  auto p = ResolvePlacement(/*flag_rank=*/1, /*node_rank=*/7, /*nproc=*/1, /*local=*/0, env);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->source, "--rank");
  EXPECT_EQ(p->world_hint, 0);
}

TEST(ResolvePlacementTest, SrunTaskTakesItsRankWorldAndLocalIdFromSlurm) {
  auto p = ResolvePlacement(-1, -1, 1, 0, kSrun);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 5);
  EXPECT_EQ(p->world_hint, 16);
  EXPECT_EQ(p->local_rank, 5);
  EXPECT_EQ(p->launcher_id, "slurm job 4242");
  EXPECT_EQ(p->source, "SLURM_PROCID");
}

TEST(ResolvePlacementTest, SrunWithoutTheOptionalVariablesStillResolves) {
  auto p = ResolvePlacement(-1, -1, 1, 0, Env({{"SLURM_PROCID", "0"}}));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->world_hint, 0);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->launcher_id, "");
  EXPECT_EQ(p->source, "SLURM_PROCID");
}

TEST(ResolvePlacementTest, IndexedPodRankIsIndexTimesProcsPlusLocal) {
  const EnvLookup env = Env({{"JOB_COMPLETION_INDEX", "3"}, {"HOSTNAME", "train-a1-3-xyz"}});
  auto p = ResolvePlacement(-1, -1, /*nproc=*/8, /*local=*/2, env);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 3 * 8 + 2);
  EXPECT_EQ(p->local_rank, 2);
  EXPECT_EQ(p->launcher_id, "pod train-a1-3-xyz");
  EXPECT_EQ(p->source, "JOB_COMPLETION_INDEX");
}

TEST(ResolvePlacementTest, NodeRankFlagWinsOverTheCompletionIndex) {
  const EnvLookup env = Env({{"JOB_COMPLETION_INDEX", "3"}, {"HOSTNAME", "pod"}});
  auto p = ResolvePlacement(-1, /*node_rank=*/1, /*nproc=*/4, /*local=*/3, env);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 7);
  EXPECT_EQ(p->source, "--node-rank");
  EXPECT_EQ(p->launcher_id, "");
}

TEST(ResolvePlacementTest, NothingGivenIsRankZeroOrTheLocalIndex) {
  auto p = ResolvePlacement(-1, -1, 1, 0, Env());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->local_rank, 0);
  EXPECT_EQ(p->world_hint, 0);
  EXPECT_EQ(p->source, "default");

  p = ResolvePlacement(-1, -1, 4, 3, Env({{"SLURM_PROCID", ""}}));  // empty = unset
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->source, "default");
}

TEST(ResolvePlacementTest, MalformedVariablesAreRefusedByName) {
  for (const char* var : {"SLURM_PROCID", "JOB_COMPLETION_INDEX"}) {
    for (const char* value : {"x", "-1", "3abc", "99999999999999999999"}) {
      auto p = ResolvePlacement(-1, -1, 1, 0, Env({{var, value}}));
      ASSERT_FALSE(p.ok()) << var << "=" << value;
      EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(p.status().message().find(std::string(var) + "='" + value + "'"), std::string::npos)
          << p.status().ToString();
    }
  }
  for (const char* var : {"SLURM_NTASKS", "SLURM_LOCALID"}) {
    auto p = ResolvePlacement(-1, -1, 1, 0, Env({{"SLURM_PROCID", "0"}, {var, "x"}}));
    ASSERT_FALSE(p.ok()) << var;
    EXPECT_NE(p.status().message().find(var), std::string::npos) << p.status().ToString();
  }
}

TEST(ResolvePlacementTest, NprocPerNodeUnderSrunIsRefused) {
  auto p = ResolvePlacement(-1, -1, /*nproc=*/8, 0, kSrun);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("srun"), std::string::npos) << p.status().ToString();
}

TEST(ResolvePlacementTest, RankFlagWithSeveralProcsPerNodeIsRefused) {
  auto p = ResolvePlacement(/*flag_rank=*/0, -1, /*nproc=*/2, 0, Env());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--node-rank"), std::string::npos) << p.status().ToString();

  p = ResolvePlacement(-1, -1, /*nproc=*/0, 0, Env());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--nproc-per-node"), std::string::npos) << p.status().ToString();
}

TEST(ResolvePlacementTest, TorchrunVariablesGiveRankWorldLocalRankAndMaster) {
  const EnvLookup env = Env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.7"},
                             {"MASTER_PORT", "29500"}, {"JOB_COMPLETION_INDEX", "9"}});
  auto p = ResolvePlacement(-1, -1, 1, 0, env);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->world_hint, 4);
  EXPECT_EQ(p->local_rank, 1);
  EXPECT_EQ(p->source, "RANK");
  EXPECT_EQ(p->master, "10.0.0.7:29500");
  // srun's variables and --rank win over torchrun's.
  EXPECT_EQ(ResolvePlacement(-1, -1, 1, 0, Env({{"RANK", "3"}, {"SLURM_PROCID", "1"}}))->rank, 1);
  EXPECT_EQ(ResolvePlacement(2, -1, 1, 0, env)->rank, 2);
  EXPECT_EQ(ResolvePlacement(-1, -1, 1, 0, Env({{"MASTER_ADDR", "::1"}, {"MASTER_PORT", "7"}}))->master, "[::1]:7");
}

TEST(ResolvePlacementTest, BadTorchrunVariablesAreRefusedByName) {
  for (const auto& [vars, word] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "WORLD_SIZE=4"},
           {{{"RANK", "x"}}, "RANK='x'"},
           {{{"MASTER_ADDR", "h"}}, "needs MASTER_PORT"},
           {{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT='70000'"}}) {
    auto p = ResolvePlacement(-1, -1, 1, 0, Env(vars));
    ASSERT_FALSE(p.ok()) << word;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(word), std::string::npos) << p.status().ToString();
  }
  EXPECT_FALSE(ResolvePlacement(-1, -1, /*nproc=*/2, 0, Env({{"RANK", "0"}})).ok());
}

}  // namespace
}  // namespace shardd
