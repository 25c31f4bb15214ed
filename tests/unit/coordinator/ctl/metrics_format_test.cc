// shardctl metrics' output: the table shows the loss scaler's columns only
// when a row was skipped or scaled, a preference: job's TRL columns only for
// that job (an SFT job's table and JSON are as before), and JSON lines parse
// (NaN and inf as null).
#include "coordinator/ctl/metrics_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace shardctl {
namespace {

using shardd::v1::MetricRow;

MetricRow Row(int64_t step, double loss, double loss_scale, bool skipped = false) {
  MetricRow r;
  r.set_step(step);
  r.set_attempt(1);
  r.set_loss(loss);
  r.set_lr(3e-4);
  r.set_grad_norm(0.75);
  r.set_tokens(1024);
  r.set_seconds(0.5);
  r.set_tokens_per_s(2048);
  r.set_loss_scale(loss_scale);
  r.set_skipped(skipped);
  return r;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(MetricsFormatTest, TableWithoutAScalerHasNoScaleColumn) {
  // 1: no scaler; 0: a worker too old to say.
  const auto lines = Lines(MetricsTable({Row(1, 5.25, 1), Row(2, 4.5, 0)}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "STEP       LOSS       LR          GRAD_NORM  TOKENS/S");
  EXPECT_EQ(lines[1], "1          5.2500     3.000e-04   0.7500     2048");
  EXPECT_EQ(lines[2].substr(0, 21), "2          4.5000    ");
  EXPECT_EQ(lines[1].find("SCALE"), std::string::npos);
}

TEST(MetricsFormatTest, ASkippedOrScaledRowAddsScaleAndSkipped) {
  const auto scaled = Lines(MetricsTable({Row(1, 5.25, 1), Row(2, 4.5, 32768)}));
  ASSERT_EQ(scaled.size(), 3u);
  EXPECT_NE(scaled[0].find("SCALE"), std::string::npos) << scaled[0];
  EXPECT_NE(scaled[0].find("SKIPPED"), std::string::npos) << scaled[0];
  EXPECT_NE(scaled[2].find("32768"), std::string::npos) << scaled[2];
  EXPECT_EQ(scaled[2].find("yes"), std::string::npos) << scaled[2];

  // A skipped step under a scale of 1 (the floor) still shows.
  const auto skipped =
      Lines(MetricsTable({Row(1, 5.25, 1), Row(2, std::numeric_limits<double>::infinity(), 1, true)}));
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_NE(skipped[0].find("SKIPPED"), std::string::npos) << skipped[0];
  EXPECT_EQ(skipped[2].substr(skipped[2].size() - 3), "yes") << skipped[2];
  EXPECT_NE(skipped[2].find("inf"), std::string::npos) << skipped[2];
}

TEST(MetricsFormatTest, EmptyTableIsTheHeader) { EXPECT_EQ(Lines(MetricsTable({})).size(), 1u); }

TEST(MetricsFormatTest, JsonLinesCarryEveryFieldAndNullForNonFinite) {
  MetricRow skipped = Row(2, std::nan(""), 65536, true);
  skipped.set_grad_norm(std::numeric_limits<double>::infinity());
  const auto lines = Lines(MetricsJsonLines({Row(1, 5.25, 1), skipped}));
  ASSERT_EQ(lines.size(), 2u);
  const auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["step"], 1);
  EXPECT_EQ(a["attempt"], 1);
  EXPECT_DOUBLE_EQ(a["loss"].get<double>(), 5.25);
  EXPECT_DOUBLE_EQ(a["lr"].get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(a["grad_norm"].get<double>(), 0.75);
  EXPECT_EQ(a["tokens"], 1024);
  EXPECT_DOUBLE_EQ(a["seconds"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(a["tokens_per_s"].get<double>(), 2048);
  EXPECT_EQ(a["skipped"], false);
  EXPECT_DOUBLE_EQ(a["loss_scale"].get<double>(), 1);
  const auto b = nlohmann::json::parse(lines[1]);  // throws on NaN/Infinity literals
  EXPECT_TRUE(b["loss"].is_null());
  EXPECT_TRUE(b["grad_norm"].is_null());
  EXPECT_EQ(b["skipped"], true);
  EXPECT_DOUBLE_EQ(b["loss_scale"].get<double>(), 65536);
  EXPECT_EQ(MetricsJsonLines({}), "");
}

// Steps with a held-out evaluation (job file eval:) add EVAL_LOSS and, when
// exact match was computed, EXACT_MATCH; other rows leave them blank; JSON
// lines carry the eval keys on every row (0 samples and nulls when none ran).
TEST(MetricsFormatTest, EvaluatedStepsAddEvalColumns) {
  MetricRow evaluated = Row(2, 4.5, 1);
  evaluated.set_eval_samples(40);
  evaluated.set_eval_loss(3.75);
  evaluated.set_eval_exact_match(0.25);
  const auto lines = Lines(MetricsTable({Row(1, 5.25, 1), evaluated}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "STEP       LOSS       LR          GRAD_NORM  TOKENS/S   EVAL_LOSS  EXACT_MATCH");
  EXPECT_EQ(lines[1], "1          5.2500     3.000e-04   0.7500     2048");
  EXPECT_EQ(lines[2], "2          4.5000     3.000e-04   0.7500     2048       3.7500     0.250");
  const auto json = Lines(MetricsJsonLines({Row(1, 5.25, 1), evaluated}));
  ASSERT_EQ(json.size(), 2u);
  const auto plain = nlohmann::json::parse(json[0]);
  EXPECT_EQ(plain["eval_samples"], 0);
  EXPECT_TRUE(plain["eval_loss"].is_null());
  EXPECT_TRUE(plain["eval_exact_match"].is_null());
  const auto j = nlohmann::json::parse(json[1]);
  EXPECT_EQ(j["eval_samples"], 40);
  EXPECT_EQ(j["eval_loss"], 3.75);
  EXPECT_EQ(j["eval_exact_match"], 0.25);
  evaluated.set_eval_exact_match(-1);  // loss only: no EXACT_MATCH column
  EXPECT_EQ(Lines(MetricsTable({evaluated}))[0], "STEP       LOSS       LR          GRAD_NORM  TOKENS/S   EVAL_LOSS");
}

MetricRow DpoRow(int64_t step, double accuracy, double nll = 0) {
  MetricRow r = Row(step, 0.6931, 1);
  r.set_pairs(8);
  r.set_rewards_chosen(0.125);
  r.set_rewards_rejected(-0.25);
  r.set_rewards_accuracies(accuracy);
  r.set_rewards_margins(0.375);
  r.set_logps_chosen(-12.5);
  r.set_logps_rejected(-20.25);
  r.set_nll(nll);
  return r;
}

// A preference: job adds TRL's columns (nll only for ORPO, the one method
// that reports it) after TOKENS/S.
TEST(MetricsFormatTest, APreferenceJobAddsTrlsColumns) {
  const auto lines = Lines(MetricsTable({DpoRow(1, 0.5), DpoRow(2, 0.875)}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "STEP       LOSS       LR          GRAD_NORM  TOKENS/S   rewards/chosen rewards/rejected rewards/accuracies "
            "rewards/margins logps/chosen logps/rejected");
  EXPECT_EQ(lines[2],
            "2          0.6931     3.000e-04   0.7500     2048       0.1250         -0.2500          0.8750             "
            "0.3750          -12.5000     -20.2500");
  const auto orpo = Lines(MetricsTable({DpoRow(1, 1, 1.5)}));
  ASSERT_EQ(orpo.size(), 2u);
  EXPECT_EQ(orpo[0].substr(orpo[0].size() - 18), "logps/rejected nll") << orpo[0];
  EXPECT_EQ(orpo[1].substr(orpo[1].size() - 6), "1.5000") << orpo[1];
}

TEST(MetricsFormatTest, APreferenceJobsJsonCarriesTrlsKeys) {
  MetricRow skipped = DpoRow(2, 0.5);
  skipped.set_skipped(true);
  skipped.set_rewards_chosen(std::nan(""));
  const auto lines = Lines(MetricsJsonLines({DpoRow(1, 0.875), skipped}));
  ASSERT_EQ(lines.size(), 2u);
  const auto a = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(a["pairs"], 8);
  EXPECT_EQ(a["rewards/chosen"], 0.125);
  EXPECT_EQ(a["rewards/rejected"], -0.25);
  EXPECT_EQ(a["rewards/accuracies"], 0.875);
  EXPECT_EQ(a["rewards/margins"], 0.375);
  EXPECT_EQ(a["logps/chosen"], -12.5);
  EXPECT_EQ(a["logps/rejected"], -20.25);
  EXPECT_EQ(a["nll"], 0);
  EXPECT_EQ(a["loss"], 0.6931);
  EXPECT_TRUE(nlohmann::json::parse(lines[1])["rewards/chosen"].is_null());
}

// An SFT job (no row has pairs or eval pairs) prints exactly what it printed
// before, an evaluated step included.
TEST(MetricsFormatTest, AnSftJobHasNoPreferenceColumnsOrKeys) {
  MetricRow evaluated = Row(2, 4.5, 1);
  evaluated.set_eval_samples(40);
  evaluated.set_eval_loss(3.75);
  evaluated.set_eval_exact_match(-1);
  const std::vector<MetricRow> rows = {Row(1, 5.25, 1), evaluated};
  EXPECT_EQ(MetricsTable(rows),
            "STEP       LOSS       LR          GRAD_NORM  TOKENS/S   EVAL_LOSS\n"
            "1          5.2500     3.000e-04   0.7500     2048\n"
            "2          4.5000     3.000e-04   0.7500     2048       3.7500\n");
  EXPECT_EQ(MetricsJsonLines(rows),
            R"({"step":1,"attempt":1,"loss":5.25,"lr":0.0003,"grad_norm":0.75,"tokens":1024,"seconds":0.5,)"
            R"("tokens_per_s":2048.0,"skipped":false,"loss_scale":1.0,"eval_samples":0,"eval_loss":null,)"
            R"("eval_exact_match":null})"
            "\n"
            R"({"step":2,"attempt":1,"loss":4.5,"lr":0.0003,"grad_norm":0.75,"tokens":1024,"seconds":0.5,)"
            R"("tokens_per_s":2048.0,"skipped":false,"loss_scale":1.0,"eval_samples":40,"eval_loss":3.75,)"
            R"("eval_exact_match":null})"
            "\n");
}

// A DPO step that also evaluated 4 held-out pairs.
MetricRow DpoEvalRow(int64_t step, double eval_nll = 0) {
  MetricRow r = DpoRow(step, 0.875);
  r.set_eval_samples(4);
  r.set_eval_loss(0.625);
  r.set_eval_exact_match(-1);
  r.set_eval_pairs(4);
  r.set_eval_rewards_chosen(0.0625);
  r.set_eval_rewards_rejected(-0.125);
  r.set_eval_rewards_accuracies(0.75);
  r.set_eval_rewards_margins(0.1875);
  r.set_eval_logps_chosen(-14.5);
  r.set_eval_logps_rejected(-18.75);
  r.set_eval_nll(eval_nll);
  return r;
}

// Steps that evaluated held-out pairs add TRL's eval/ columns after
// EVAL_LOSS (eval/nll only for ORPO); the other steps leave them blank.
TEST(MetricsFormatTest, PairEvaluationAddsTrlsEvalColumns) {
  const auto lines = Lines(MetricsTable({DpoRow(1, 0.5), DpoEvalRow(2)}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "STEP       LOSS       LR          GRAD_NORM  TOKENS/S   rewards/chosen rewards/rejected rewards/accuracies "
            "rewards/margins logps/chosen logps/rejected EVAL_LOSS  eval/rewards/chosen eval/rewards/rejected "
            "eval/rewards/accuracies eval/rewards/margins eval/logps/chosen eval/logps/rejected");
  EXPECT_EQ(lines[1].find("0.6250"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("0.6250     0.0625              -0.1250               0.7500                  0.1875     "
                          "          -14.5000          -18.7500"),
            std::string::npos)
      << lines[2];
  const auto orpo = Lines(MetricsTable({DpoEvalRow(1, 2.5)}));
  ASSERT_EQ(orpo.size(), 2u);
  EXPECT_EQ(orpo[0].substr(orpo[0].size() - 28), "eval/logps/rejected eval/nll") << orpo[0];
  EXPECT_EQ(orpo[1].substr(orpo[1].size() - 6), "2.5000") << orpo[1];
}

TEST(MetricsFormatTest, PairEvaluationJsonCarriesTrlsEvalKeys) {
  const auto lines = Lines(MetricsJsonLines({DpoRow(1, 0.5), DpoEvalRow(2)}));
  ASSERT_EQ(lines.size(), 2u);
  const auto plain = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(plain["eval_pairs"], 0);
  EXPECT_TRUE(plain["eval/rewards/accuracies"].is_null());
  EXPECT_TRUE(plain["eval/nll"].is_null());
  const auto j = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(j["eval_samples"], 4);
  EXPECT_EQ(j["eval_loss"], 0.625);
  EXPECT_EQ(j["eval_pairs"], 4);
  EXPECT_EQ(j["eval/rewards/chosen"], 0.0625);
  EXPECT_EQ(j["eval/rewards/rejected"], -0.125);
  EXPECT_EQ(j["eval/rewards/accuracies"], 0.75);
  EXPECT_EQ(j["eval/rewards/margins"], 0.1875);
  EXPECT_EQ(j["eval/logps/chosen"], -14.5);
  EXPECT_EQ(j["eval/logps/rejected"], -18.75);
  EXPECT_EQ(j["eval/nll"], 0);
  // A preference job that never evaluated pairs keeps a47ed99's shape.
  EXPECT_FALSE(nlohmann::json::parse(Lines(MetricsJsonLines({DpoRow(1, 0.5)}))[0]).contains("eval_pairs"));
}

}  // namespace
}  // namespace shardctl
