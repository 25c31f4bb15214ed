// The planner's price of context parallelism (shard/plan/cp_cost.h): Llama
// 3.1 70B full SFT at 32k tokens on 8x A100 80GB. Per rank, the activations,
// logits and scratch of seq_len / C tokens plus one layer's K/V and dK/dV at
// the whole sequence; the shards do not change with C; the K/V exchange is
// priced per layer over the CP group; the tokens per step stay the job's;
// a job that does not fit is told which C would; a C that does not divide
// the world or the sequence is a reason, in one line.
#include <gtest/gtest.h>

#include <cstdio>

#include "shard/plan/cp_cost.h"
#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;
using testing_catalog::Root;

constexpr const char* kCluster = "8xA100-80GB-SXM";

// The 70B recipe at `seq` tokens, one sequence per rank and micro-batch, C as given.
Workload Long70b(int64_t seq, int cp) {
  auto job = LoadJobConfig(Root() + "/configs/jobs/llama3-70b-sft-8xa100-80gb.yaml",
                           {"model.from_hf=" + Root() + "/configs/models/llama3.1-70b",
                            "data.seq_len=" + std::to_string(seq), "train.micro_batch=1", "train.global_batch=8"});
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  auto cluster = Catalog().Cluster(kCluster);
  EXPECT_TRUE(cluster.ok());
  auto jw = WorkloadFromJob(*job, *cluster);
  EXPECT_TRUE(jw.ok()) << jw.status().ToString();
  Workload w = jw->workload;
  w.context_parallel = cp;
  return w;
}

Plan PlanOf(const Workload& w) { return PlanWorkload(w, *Catalog().Cluster(kCluster)); }

int64_t Item(const std::vector<MemoryItem>& items, const std::string& prefix) {
  for (const auto& i : items)
    if (i.what.rfind(prefix, 0) == 0) return i.bytes;
  return -1;
}

TEST(CpPlanTest, ActivationsAreThoseOfTheLocalTokensPlusOneLayersKv) {
  const Plan one = PlanOf(Long70b(32768, 1));
  EXPECT_EQ(one.verdict, Verdict::kDoesNotFit) << FormatPlanText(one);
  EXPECT_EQ(Item(one.memory.device, "context-parallel"), -1);
  for (int cp : {2, 4, 8}) {
    const Workload w = Long70b(32768, cp);
    const Plan p = PlanOf(w);
    SCOPED_TRACE("C = " + std::to_string(cp));
    EXPECT_EQ(w.local_seq_len(), 32768 / cp);
    EXPECT_EQ(Item(p.memory.device, "activations"),
              ActivationBytes(w.model, 1, 32768 / cp, /*checkpointing=*/true, DType::kBF16));
    // CpAttention's buffers (fp32): 3 whole K/V, 2 local, 4 chunks of queries,
    // plus bf16's rounded K/V and chunk queries on a GPU.
    const int64_t kvw = 2 * 8 * 128, hq = 64 * 128, S = 32768, chunk = S / (2 * cp);
    EXPECT_EQ(Item(p.memory.device, "context-parallel"),
              (3 * S * kvw + 2 * (S / cp) * kvw + 4 * chunk * hq + S * kvw + chunk * hq) * 4);
    // FSDP shards over every rank: the shard does not depend on C.
    EXPECT_EQ(Item(p.memory.device, "parameter shard"), Item(one.memory.device, "parameter shard"));
    EXPECT_LT(p.memory.device_total, one.memory.device_total);
    std::printf("C=%d: %lld tokens per rank, %.2f GiB per GPU (%s), K/V exchange %.3f s per micro-batch, %.1f tokens/s\n",
                cp, static_cast<long long>(w.local_seq_len()), GiB(p.memory.device_total), VerdictName(p.verdict),
                p.time.cp_exchange_s, p.time.tokens_per_s);
  }
  EXPECT_LT(PlanOf(Long70b(32768, 8)).memory.device_total, PlanOf(Long70b(32768, 4)).memory.device_total);
}

TEST(CpPlanTest, ExchangeIsPricedPerLayerAndTokensPerStepStayTheJobs) {
  const Workload w = Long70b(32768, 8);
  const Plan p = PlanOf(w);
  const ClusterSpec cl = *Catalog().Cluster(kCluster);
  // 80 layers x 3 collectives x 7/8 x (32768 x 2 x 8 x 128 x 4 B) over the group's bandwidth.
  const double expect = 80 * 3 * (7.0 / 8) * (32768.0 * 2 * 8 * 128 * 4) / (cl.CollectiveGBs(8) * 1e9);
  EXPECT_NEAR(p.time.cp_exchange_s, expect, expect * 1e-9);
  EXPECT_GE(p.time.exposed_comm_s, p.time.cp_exchange_s);
  // 8 sequences of 32768 tokens per step: one data rank reads all 8, each rank computes 4096 tokens of each.
  EXPECT_EQ(w.data_ranks(), 1);
  EXPECT_EQ(p.time.micro_batches, 8);
  EXPECT_NEAR(p.time.tokens_per_s * p.time.step_s, 8.0 * 32768, 1e-3);
  const Plan one = PlanOf(Long70b(32768, 1));
  EXPECT_NEAR(one.time.tokens_per_s * one.time.step_s, 8.0 * 32768, 1e-3);
  // The same work per rank, split differently: compute per step within 1% of C = 1's.
  EXPECT_NEAR(p.time.micro_batches * p.time.compute_s, one.time.micro_batches * one.time.compute_s,
              0.01 * one.time.micro_batches * one.time.compute_s);
}

TEST(CpPlanTest, AJobThatDoesNotFitIsToldWhichContextParallelFits) {
  const Plan one = PlanOf(Long70b(32768, 1));
  const auto recs = Recommend(one, Catalog());
  ASSERT_FALSE(recs.empty());
  bool found = false;
  for (const auto& r : recs)
    for (const auto& s : r.sets)
      if (s.rfind("parallel.context_parallel=", 0) == 0) {
        found = true;
        EXPECT_TRUE(r.verdict == Verdict::kFits || r.verdict == Verdict::kTight) << r.change;
      }
  EXPECT_TRUE(found) << recs.front().change;
}

TEST(CpPlanTest, AContextParallelThatDoesNotDivideIsAReason) {
  const Plan p = PlanOf(Long70b(32768, 3));
  EXPECT_EQ(p.verdict, Verdict::kCannotRun);
  ASSERT_FALSE(p.reasons.empty());
  EXPECT_NE(p.reasons[0].find("parallel.context_parallel 3"), std::string::npos) << p.reasons[0];
  EXPECT_EQ(CpCandidates(Long70b(32768, 1)), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(CpCandidates(Long70b(100, 1)), (std::vector<int>{2}));  // 100 = 2 x 2 x 25: only C = 2 cuts it
}

// The longest sequence (a multiple of 2C x 1024) that fits at C = 8, printed
// for docs/context-parallel.md; at least the 32k the issue asks for.
TEST(CpPlanTest, LongestSequenceAtEight) {
  int64_t best = 0;
  for (int64_t seq = 16 * 1024; seq <= 131072; seq += 16 * 1024) {
    const Plan p = PlanOf(Long70b(seq, 8));
    if (p.ok()) best = seq;
  }
  const Plan p = PlanOf(Long70b(best, 8));
  std::printf("longest at C=8: %lld tokens, %.2f GiB per GPU, %.1f tokens/s\n", static_cast<long long>(best),
              GiB(p.memory.device_total), p.time.tokens_per_s);
  EXPECT_GE(best, 32768);
}

}  // namespace
}  // namespace shard::plan
