// The dashboard's JSON: downsampling keeps 100k steps to the point budget
// with exact bucket means, restarts and commits are marked by step, a
// preference: job adds TRL's series (an SFT job's keys are as before), and a job
// carries its workers, events, checkpoints and admission plan.
#include <gtest/gtest.h>

#include <cmath>

#include "coordinator/server/dashboard_api.h"

namespace shardd {
namespace {

std::vector<v1::MetricRow> Rows(int n, int restart_at = -1) {
  std::vector<v1::MetricRow> rows(n);
  for (int i = 0; i < n; ++i) {
    rows[i].set_step(i + 1);
    rows[i].set_attempt(restart_at > 0 && i + 1 >= restart_at ? 2 : 1);
    rows[i].set_loss(i + 1);
    rows[i].set_lr(1e-3);
    rows[i].set_grad_norm(0.5);
    rows[i].set_tokens_per_s(1000);
    rows[i].set_loss_scale(1);
  }
  return rows;
}

TEST(DashboardApiTest, DownsamplesToTheBudgetWithBucketMeans) {
  std::vector<v1::CheckpointInfo> ckpts(2);
  ckpts[0].set_step(50000);
  ckpts[1].set_step(100000);
  const auto j = MetricsJson(Rows(100000, 60001), ckpts, 2000);
  EXPECT_EQ(j["total_rows"], 100000);
  ASSERT_EQ(j["steps"].size(), 2000u);
  ASSERT_EQ(j["loss"].size(), 2000u);
  // 50 steps per point: the first point is the mean of steps 1..50, at step 50.
  EXPECT_EQ(j["steps"][0], 50);
  EXPECT_DOUBLE_EQ(j["loss"][0].get<double>(), 25.5);
  EXPECT_EQ(j["steps"][1999], 100000);
  EXPECT_DOUBLE_EQ(j["lr"][7].get<double>(), 1e-3);
  EXPECT_EQ(j["restarts"], nlohmann::json::array({60001}));
  EXPECT_EQ(j["commits"], nlohmann::json::array({50000, 100000}));
}

TEST(DashboardApiTest, FewRowsPassThroughAndNonFiniteValuesBecomeNull) {
  auto rows = Rows(3);
  rows[1].set_loss(std::numeric_limits<double>::infinity());
  rows[1].set_grad_norm(std::nan(""));
  const auto j = MetricsJson(rows, {}, 2000);
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_TRUE(j["loss"][1].is_null());
  EXPECT_TRUE(j["grad_norm"][1].is_null());
  EXPECT_DOUBLE_EQ(j["loss"][2].get<double>(), 3);
  EXPECT_TRUE(j["restarts"].empty());
  EXPECT_EQ(MetricsJson({}, {}, 2000)["steps"].size(), 0u);
}

// A preference: job's rows (pairs > 0) add TRL's series, bucket-averaged as
// the others; an SFT job's JSON has exactly the keys it had.
TEST(DashboardApiTest, APreferenceJobAddsTheRewardsSeries) {
  auto rows = Rows(4000);
  for (int i = 0; i < 4000; ++i) {
    rows[i].set_pairs(8);
    rows[i].set_rewards_chosen(i % 2 ? 1.0 : 0.0);  // bucket means of 0.5
    rows[i].set_rewards_rejected(-1);
    rows[i].set_rewards_accuracies(0.75);
    rows[i].set_rewards_margins(2);
    rows[i].set_logps_chosen(-10);
    rows[i].set_logps_rejected(-20);
  }
  rows[1].set_rewards_margins(std::nan(""));  // left out of its bucket's mean
  const auto j = MetricsJson(rows, {}, 2000);
  for (const char* key : {"rewards_chosen", "rewards_rejected", "rewards_accuracies", "rewards_margins",
                          "logps_chosen", "logps_rejected", "nll"})
    ASSERT_EQ(j[key].size(), 2000u) << key;
  EXPECT_DOUBLE_EQ(j["rewards_chosen"][0].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["rewards_margins"][0].get<double>(), 2);
  EXPECT_DOUBLE_EQ(j["rewards_accuracies"][1999].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["logps_rejected"][3].get<double>(), -20);

  const auto sft = MetricsJson(Rows(10), {}, 2000);
  std::vector<std::string> keys;
  for (const auto& [k, v] : sft.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"commits", "grad_norm", "loss", "loss_scale", "lr", "restarts", "steps",
                                            "tokens_per_s", "total_rows"}));
}

// eval: on held-out pairs: the eval_ series average only the evaluated rows
// of a point (null where a point holds none); a job that never evaluated
// pairs has none of these keys.
TEST(DashboardApiTest, PairEvaluationsAddTheEvalRewardsSeries) {
  auto rows = Rows(40);
  for (int i = 0; i < 40; ++i) rows[i].set_pairs(8);
  const auto before = MetricsJson(rows, {}, 20);
  EXPECT_FALSE(before.contains("eval_rewards_chosen"));
  for (int i = 9; i < 40; i += 10) {  // steps 10, 20, 30, 40
    rows[i].set_eval_pairs(4);
    rows[i].set_eval_samples(4);
    rows[i].set_eval_rewards_chosen(0.25 * (i / 10));
    rows[i].set_eval_rewards_rejected(-0.5);
    rows[i].set_eval_rewards_accuracies(0.75);
    rows[i].set_eval_rewards_margins(1);
    rows[i].set_eval_logps_chosen(-10);
    rows[i].set_eval_logps_rejected(-12);
  }
  rows[0].set_eval_rewards_accuracies(0.125);  // a row without eval pairs: left out
  const auto j = MetricsJson(rows, {}, 20);    // two rows a point: steps 9-10 hold one evaluation
  for (const char* key : {"eval_rewards_chosen", "eval_rewards_rejected", "eval_rewards_accuracies",
                          "eval_rewards_margins", "eval_logps_chosen", "eval_logps_rejected", "eval_nll"})
    ASSERT_EQ(j[key].size(), 20u) << key;
  EXPECT_TRUE(j["eval_rewards_accuracies"][0].is_null());
  EXPECT_DOUBLE_EQ(j["eval_rewards_accuracies"][4].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["eval_rewards_chosen"][4].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["eval_rewards_chosen"][19].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["eval_logps_rejected"][9].get<double>(), -12);
  EXPECT_TRUE(j["eval_rewards_margins"][5].is_null());
  EXPECT_DOUBLE_EQ(j["rewards_chosen"][5].get<double>(), 0) << "the train series are as before";
}

// eval: the held-out loss and exact match average only the evaluated rows
// of a point (null elsewhere); exact match -1 (not computed) is no value.
TEST(DashboardApiTest, HeldOutEvaluationsAddTheEvalLossSeries) {
  auto rows = Rows(40);
  EXPECT_FALSE(MetricsJson(rows, {}, 20).contains("eval_loss"));
  for (int i = 9; i < 40; i += 10) {  // steps 10, 20, 30, 40
    rows[i].set_eval_samples(200);
    rows[i].set_eval_loss(4.0 / (i / 10 + 1));
    rows[i].set_eval_exact_match(i == 39 ? -1 : 0.25 * (i / 10));
  }
  rows[0].set_eval_loss(99);  // a row without evaluated samples: left out
  const auto j = MetricsJson(rows, {}, 20);  // two rows a point: steps 9-10 hold one evaluation
  ASSERT_EQ(j["eval_loss"].size(), 20u);
  ASSERT_EQ(j["eval_exact_match"].size(), 20u);
  EXPECT_TRUE(j["eval_loss"][0].is_null());
  EXPECT_DOUBLE_EQ(j["eval_loss"][4].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["eval_loss"][19].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["eval_exact_match"][4].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["eval_exact_match"][14].get<double>(), 0.5);
  EXPECT_TRUE(j["eval_exact_match"][19].is_null()) << "-1 = not computed";
  EXPECT_FALSE(j.contains("rewards_chosen")) << "an SFT job has no preference series";
}

TEST(DashboardApiTest, JobCarriesWorkersEventsCheckpointsAndPlan) {
  v1::JobStatus s;
  s.set_id("demo-1");
  s.set_state(v1::RUNNING);
  s.mutable_progress()->set_step(7);
  s.mutable_progress()->set_mfu(-1);
  auto* w = s.add_workers();
  w->set_rank(0);
  w->set_rss_bytes(12345);
  w->set_last_heartbeat_age_s(0.5);
  w->set_straggler(true);
  w->set_compute_seconds(0.41);
  w->set_collective("in all_gather #41 (unit 3) for 2.1 s");
  s.mutable_stall()->set_text("rank 1 never entered it");
  s.mutable_stall()->set_attempt(2);
  std::vector<v1::JobEvent> events(2);
  events[0].set_kind("submitted");
  events[0].set_message("jobs/demo.yaml, 2 worker(s), 40 steps; plan: fits, 1.2 GB per rank");
  events[1].set_kind("running");
  std::vector<v1::CheckpointInfo> ckpts(1);
  ckpts[0].set_step(5);
  ckpts[0].set_bytes(999);
  const auto j = JobJson(s, events, ckpts);
  EXPECT_EQ(j["id"], "demo-1");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["progress"]["step"], 7);
  EXPECT_EQ(j["progress"]["mfu"], -1);
  EXPECT_EQ(j["workers"][0]["rss_bytes"], 12345);
  // Straggler detection and the flight recorder, for the job page.
  EXPECT_EQ(j["workers"][0]["straggler"], true);
  EXPECT_DOUBLE_EQ(j["workers"][0]["compute_seconds"].get<double>(), 0.41);
  EXPECT_EQ(j["workers"][0]["collective"], "in all_gather #41 (unit 3) for 2.1 s");
  EXPECT_EQ(j["stall"]["text"], "rank 1 never entered it");
  EXPECT_EQ(j["stall"]["attempt"], 2);
  EXPECT_EQ(j["events"].size(), 2u);
  EXPECT_EQ(j["checkpoints"][0]["step"], 5);
  EXPECT_NE(j["plan"].get<std::string>().find("plan: fits"), std::string::npos);
  std::vector<v1::JobStatus> list(2);
  list[0].set_id("old");
  list[0].set_created_unix_ms(1);
  list[1].set_id("new");
  list[1].set_created_unix_ms(2);
  EXPECT_EQ(JobListJson(list)["jobs"][0]["id"], "new");
}

}  // namespace
}  // namespace shardd
