// preference: jobs in the planner: the step priced at 2 x micro_batch rows
// (each pair is a chosen and a rejected row), the dpo/ipo reference pass (one
// forward over the training pairs) and its stored values (8 B per reply);
// orpo has no reference; recommendations speak in pairs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shard/plan/plan_report.h"
#include "shard/plan/planner.h"
#include "tests/unit/plan/catalog_fixture.h"

namespace shard::plan {
namespace {

using testing_catalog::Catalog;

std::string Pairs(int rows) {
  const std::string path = ::testing::TempDir() + "/plan_pairs." + std::to_string(::getpid()) + ".jsonl";
  std::ofstream f(path);
  for (int i = 0; i < rows; ++i) f << "{\"prompt\": \"p" << i << "\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
  f << "\n";  // a blank line is no pair
  return path;
}

JobConfig Job(const std::string& jsonl, const std::string& preference, const std::vector<std::string>& sets = {}) {
  const std::string yaml = "name: p\nmodel: {preset: tiny}\n"
                           "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 64}\n"
                           "train: {steps: 10, global_batch: 8, micro_batch: 2}\n"
                           "parallel: {world_size: 2}\nresources: {device: cpu}\n" + preference;
  auto job = ParseJobConfig(yaml, "p.yaml", sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : JobConfig{};
}

Plan PlanOf(const JobConfig& job) {
  auto p = PlanJob(job, Catalog(), "");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Plan{};
}

TEST(PreferencePlan, TheStepIsPricedAtTwoRowsPerPair) {
  const std::string jsonl = Pairs(100);
  const Plan dpo = PlanOf(Job(jsonl, "preference: {method: dpo}\n"));
  EXPECT_EQ(dpo.workload.rows_per_item, 2);
  EXPECT_EQ(dpo.workload.micro_batch, 4);
  EXPECT_EQ(dpo.workload.global_batch, 16);
  // The same memory and step as an SFT job of 2 x the sequences.
  const std::string sft_yaml = "name: s\nmodel: {preset: tiny}\n"
                               "data: {jsonl: " + jsonl + ", tokenizer: byte, template: plain, seq_len: 64}\n"
                               "train: {steps: 10, global_batch: 16, micro_batch: 4}\n"
                               "parallel: {world_size: 2}\nresources: {device: cpu}\n";
  auto sft_job = ParseJobConfig(sft_yaml, "s.yaml");
  ASSERT_TRUE(sft_job.ok()) << sft_job.status().ToString();
  const Plan sft = PlanOf(*sft_job);
  EXPECT_EQ(dpo.memory.device_total, sft.memory.device_total);
  EXPECT_DOUBLE_EQ(dpo.time.step_s, sft.time.step_s);
  EXPECT_LT(sft.workload.reference_pairs, 0) << "an SFT job has no reference pass";
}

TEST(PreferencePlan, PricesTheReferencePassAndItsFile) {
  const std::string jsonl = Pairs(101);
  const Plan p = PlanOf(Job(jsonl, "preference: {method: ipo}\n"));
  const ReferenceCost& r = p.reference;
  EXPECT_EQ(r.pairs, 101);
  // ceil(101 / 2 ranks) = 51 pairs per rank, 2 per forward: 26 forwards.
  EXPECT_EQ(r.forwards, 26);
  EXPECT_EQ(r.file_bytes, 16 * 101 + 24);
  // A forward is a share of the training micro-batch's compute (no backward).
  EXPECT_GT(r.forward_s, 0);
  EXPECT_LT(r.forward_s, p.time.compute_s + p.time.comm_s);
  EXPECT_GT(r.forward_s, 0.2 * p.time.compute_s);
  EXPECT_DOUBLE_EQ(r.pass_s, 26 * r.forward_s);
  const std::string text = FormatPlanText(p);
  EXPECT_NE(text.find("Reference pass"), std::string::npos) << text;
  EXPECT_NE(text.find("for 101 pairs"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(PlanToJson(p));
  EXPECT_EQ(j["reference"]["pairs"], 101);
  EXPECT_EQ(j["reference"]["file_bytes"], 16 * 101 + 24);
  EXPECT_EQ(j["workload"]["preference_pairs_per_micro_batch"], 2);

  // Activation checkpointing recomputes in training, not in the pass.
  const Plan ac = PlanOf(Job(jsonl, "preference: {method: ipo}\n", {"parallel.activation_checkpointing=true"}));
  EXPECT_NEAR(ac.reference.forward_s, r.forward_s, 1e-9 + 1e-6 * r.forward_s);
  EXPECT_GT(ac.time.compute_s, p.time.compute_s);
}

TEST(PreferencePlan, OrpoHasNoReferenceAndUnknownDataIsPricedPerPair) {
  const Plan orpo = PlanOf(Job(Pairs(10), "preference: {method: orpo}\n"));
  EXPECT_EQ(orpo.workload.rows_per_item, 2);
  EXPECT_LT(orpo.workload.reference_pairs, 0);
  EXPECT_EQ(FormatPlanText(orpo).find("Reference pass"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(PlanToJson(orpo)).contains("reference"));

  const Plan unknown = PlanOf(Job("/nonexistent/pairs.jsonl", "preference: {method: dpo}\n"));
  EXPECT_EQ(unknown.reference.pairs, 0);
  EXPECT_GT(unknown.reference.forward_s, 0);
  bool noted = false;
  for (const auto& n : unknown.notes) noted |= n.find("priced per pair") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(PreferencePlan, RecommendationsCountPairs) {
  // Short of memory on purpose: halvings of the micro-batch are proposed in
  // the job file's unit (pairs), never as half a pair.
  const Plan p = PlanOf(Job(Pairs(10), "preference: {method: dpo}\n"));
  for (const auto& r : Recommend(p, Catalog()))
    for (const auto& s : r.sets) {
      if (s.rfind("train.micro_batch=", 0) != 0) continue;
      const int mb = std::stoi(s.substr(18));
      EXPECT_GE(mb, 1) << s;
      EXPECT_TRUE(mb == 1 || mb == 4 || mb == 8) << s;  // from 2 pairs: halved to 1, doubled to 4 or 8
    }
}

}  // namespace
}  // namespace shard::plan
