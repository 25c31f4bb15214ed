// The run report page: its embedded data parses back with the curves'
// points (downsampled to the budget), the SVG charts draw exactly those
// points, a message holding "</script>" or markup cannot break out of the
// page, the loss-scale chart appears only when a scaler ran, a preference:
// job's rewards, accuracy and log-prob charts and TRL figures appear only for
// it, and the final figures come from the rows.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "coordinator/report/run_report.h"
#include "coordinator/report/svg_chart.h"

namespace shardd {
namespace {

RunReportInput Input(int n, double scale = 1) {
  RunReportInput in;
  in.job.set_id("r-1");
  in.job.set_name("r");
  in.job.set_state(v1::SUCCEEDED);
  in.job.mutable_progress()->set_step(n);
  in.job.mutable_progress()->set_total_steps(n);
  in.job.set_created_unix_ms(1000);
  in.job.set_updated_unix_ms(61000);
  for (int i = 0; i < n; ++i) {
    v1::MetricRow r;
    r.set_step(i + 1);
    r.set_attempt(1);
    r.set_loss(10.0 / (i + 1));
    r.set_lr(1e-3);
    r.set_grad_norm(1);
    r.set_tokens(100);
    r.set_seconds(0.5);
    r.set_tokens_per_s(200);
    r.set_loss_scale(scale);
    in.rows.push_back(r);
  }
  v1::JobEvent sub;
  sub.set_kind("submitted");
  sub.set_message("job.yaml, 2 worker(s) </script><b>x</b>");
  in.events.push_back(sub);
  return in;
}

nlohmann::json Data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const size_t a = html.find(open) + open.size();
  const size_t b = html.find("</script>", a);
  return nlohmann::json::parse(html.substr(a, b - a));
}

int DataPoints(const std::string& html, const std::string& chart) {
  const size_t at = html.find("id=\"chart-" + chart + "\"");
  if (at == std::string::npos) return -1;
  const size_t p = html.find("data-points=\"", at) + 13;
  return std::stoi(html.substr(p));
}

TEST(RunReportTest, DataAndChartsCarryEveryPoint) {
  const std::string html = RunReportHtml(Input(50));
  const auto d = Data(html);
  ASSERT_EQ(d["metrics"]["steps"].size(), 50u);
  EXPECT_DOUBLE_EQ(d["metrics"]["loss"][49].get<double>(), 10.0 / 50);
  EXPECT_EQ(DataPoints(html, "loss"), 50);
  EXPECT_EQ(DataPoints(html, "tokens_per_s"), 50);
  EXPECT_EQ(DataPoints(html, "loss_scale"), -1);  // no scaler ran
  EXPECT_DOUBLE_EQ(d["final"]["final_loss"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(d["final"]["min_loss"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(d["final"]["mean_tokens_per_s"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(d["final"]["wall_seconds"].get<double>(), 60);
  EXPECT_TRUE(d["final"]["eval_loss"].is_null());
  EXPECT_EQ(d["job"]["plan"], "job.yaml, 2 worker(s) </script><b>x</b>");
}

// A job with an eval: section: the held-out loss is its own curve (one point
// per evaluation) and the last one is a final figure.
TEST(RunReportTest, EvaluationsAreACurveAndAFinalFigure) {
  RunReportInput in = Input(30);
  for (int i : {9, 19, 29}) {
    in.rows[i].set_eval_samples(16);
    in.rows[i].set_eval_loss(3.0 - i / 10);
  }
  const std::string html = RunReportHtml(in);
  EXPECT_EQ(DataPoints(html, "eval_loss"), 3);
  EXPECT_DOUBLE_EQ(Data(html)["final"]["eval_loss"].get<double>(), 1.0);
  EXPECT_EQ(html.find("id=\"eval-note\""), std::string::npos);
  EXPECT_NE(RunReportHtml(Input(3)).find("id=\"eval-note\""), std::string::npos) << "no eval: the note says so";
}

// A last step whose loss is NaN (the loss scaler skipped it) is the final
// loss as it was, never the last finite figure before it.
TEST(RunReportTest, ANonFiniteLastLossIsTheFinalLoss) {
  RunReportInput in = Input(30, 65536);
  in.rows.back().set_loss(std::numeric_limits<double>::quiet_NaN());
  in.rows.back().set_skipped(true);
  const std::string html = RunReportHtml(in);
  const auto f = Data(html)["final"];
  EXPECT_TRUE(f["final_loss"].is_null()) << f.dump();
  EXPECT_EQ(f["final_loss_not_finite"], "NaN at step 30 (skipped by the loss scaler)");
  EXPECT_NE(html.find("<b>NaN at step 30 (skipped by the loss scaler)</b>"), std::string::npos);
  EXPECT_DOUBLE_EQ(f["min_loss"].get<double>(), 10.0 / 29) << "the lowest finite loss is still a figure";
}

TEST(RunReportTest, MarkupInMessagesStaysText) {
  const std::string html = RunReportHtml(Input(3));
  EXPECT_EQ(html.find("<b>x</b>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;x&lt;/b&gt;"), std::string::npos);
  // Exactly one </script>: the data block's own end.
  const size_t first = html.find("</script>");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(html.find("</script>", first + 1), std::string::npos);
}

TEST(RunReportTest, LongRunsAreDownsampledAndScalerShown) {
  const std::string html = RunReportHtml(Input(100000, 65536), 2000);
  EXPECT_EQ(Data(html)["metrics"]["steps"].size(), 2000u);
  EXPECT_EQ(DataPoints(html, "loss"), 2000);
  EXPECT_EQ(DataPoints(html, "loss_scale"), 2000);
  EXPECT_LT(html.size(), 600u << 10);
}

// A preference: job: the rewards chart (chosen, rejected, margins), the
// accuracy and log-prob charts, and the last step's TRL figures.
TEST(RunReportTest, APreferenceJobHasRewardsChartsAndFigures) {
  RunReportInput in = Input(20);
  for (int i = 0; i < 20; ++i) {
    v1::MetricRow& r = in.rows[i];
    r.set_pairs(8);
    r.set_rewards_chosen(0.01 * i);
    r.set_rewards_rejected(-0.02 * i);
    r.set_rewards_margins(0.03 * i);
    r.set_rewards_accuracies(i < 10 ? 0.5 : 0.875);
    r.set_logps_chosen(-10 + 0.1 * i);
    r.set_logps_rejected(-10 - 0.1 * i);
  }
  in.rows[4].set_rewards_chosen(std::numeric_limits<double>::quiet_NaN());  // a gap, not a 0
  const std::string html = RunReportHtml(in);
  EXPECT_EQ(DataPoints(html, "rewards"), 20 + 19 + 20) << "three lines, one NaN left out";
  EXPECT_EQ(DataPoints(html, "rewards_accuracies"), 20);
  EXPECT_EQ(DataPoints(html, "logps"), 40);
  for (const char* series : {"data-series=\"chosen\"", "data-series=\"rejected\"", "data-series=\"margins\""})
    EXPECT_NE(html.find(series), std::string::npos) << series;
  const auto d = Data(html);
  ASSERT_EQ(d["metrics"]["rewards_margins"].size(), 20u);
  EXPECT_DOUBLE_EQ(d["metrics"]["rewards_margins"][19].get<double>(), 0.57);
  EXPECT_TRUE(d["metrics"]["rewards_chosen"][4].is_null());
  const auto p = d["final"]["preference"];
  EXPECT_EQ(p["step"], 20);
  EXPECT_EQ(p["pairs"], 8);
  EXPECT_DOUBLE_EQ(p["rewards_accuracies"].get<double>(), 0.875);
  EXPECT_DOUBLE_EQ(p["rewards_margins"].get<double>(), 0.57);
  EXPECT_NE(html.find("<span class=\"muted\">rewards/accuracies</span><b>87.5 %</b>"), std::string::npos);

  // An SFT job's report has none of it.
  const std::string sft = RunReportHtml(Input(20));
  EXPECT_EQ(DataPoints(sft, "rewards"), -1);
  EXPECT_EQ(DataPoints(sft, "rewards_accuracies"), -1);
  EXPECT_EQ(sft.find("rewards"), std::string::npos);
  EXPECT_FALSE(Data(sft)["final"].contains("preference"));
}

// eval: on held-out pairs: the eval rewards and reward accuracy charts hold
// the evaluated steps only (like the eval loss), and the last evaluation's
// eval/ figures are final figures; a job without one has none of it.
TEST(RunReportTest, PairEvaluationsHaveEvalRewardsChartsAndFigures) {
  RunReportInput in = Input(20);
  for (int i = 0; i < 20; ++i) in.rows[i].set_pairs(8);
  const std::string none = RunReportHtml(in);
  EXPECT_EQ(DataPoints(none, "eval_rewards"), -1);
  EXPECT_EQ(none.find("eval/rewards"), std::string::npos);
  EXPECT_FALSE(Data(none)["final"].contains("preference_eval"));
  for (int i = 4; i < 20; i += 5) {  // steps 5, 10, 15, 20
    v1::MetricRow& r = in.rows[i];
    r.set_eval_samples(4);
    r.set_eval_loss(0.6);
    r.set_eval_pairs(4);
    r.set_eval_rewards_chosen(0.1 * i);
    r.set_eval_rewards_rejected(-0.1 * i);
    r.set_eval_rewards_margins(0.2 * i);
    r.set_eval_rewards_accuracies(i < 10 ? 0.5 : 0.75);
    r.set_eval_logps_chosen(-9);
    r.set_eval_logps_rejected(-11);
  }
  const std::string html = RunReportHtml(in);
  EXPECT_EQ(DataPoints(html, "eval_loss"), 4);
  EXPECT_EQ(DataPoints(html, "eval_rewards"), 3 * 4);
  EXPECT_EQ(DataPoints(html, "eval_rewards_accuracies"), 4);
  const auto p = Data(html)["final"]["preference_eval"];
  EXPECT_EQ(p["step"], 20);
  EXPECT_EQ(p["eval_pairs"], 4);
  EXPECT_DOUBLE_EQ(p["eval_rewards_accuracies"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(p["eval_rewards_margins"].get<double>(), 0.2 * 19);
  EXPECT_DOUBLE_EQ(p["eval_logps_rejected"].get<double>(), -11);
  EXPECT_NE(html.find("<span class=\"muted\">eval/rewards/accuracies</span><b>75 %</b>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"muted\">eval/rewards/margins</span>"), std::string::npos);
}

// The one-line chart's markup, as it was before charts could hold several
// lines (an SFT report draws exactly what it drew).
TEST(SvgChartTest, OneLineMarkupIsUnchanged) {
  ChartSeries s{"l", "loss", "#000", {1, 2}, {1.0, 2.0}};
  EXPECT_EQ(SvgLineChart(s, {2}, {}),
            "<div class=\"chart\"><h3>loss <span class=\"muted\">2</span></h3><svg id=\"chart-l\" "
            "viewBox=\"0 0 400 170\" preserveAspectRatio=\"none\" data-points=\"2\"><line class=\"axis\" x1=\"46\" "
            "y1=\"150\" x2=\"392\" y2=\"150\"/><line class=\"axis\" x1=\"46\" y1=\"8\" x2=\"46\" y2=\"150\"/>"
            "<text x=\"42\" y=\"16\" text-anchor=\"end\">2</text><text x=\"42\" y=\"150\" text-anchor=\"end\">1"
            "</text><text x=\"46\" y=\"164\">1</text><text x=\"392\" y=\"164\" text-anchor=\"end\">step 2</text>"
            "<line class=\"commit\" x1=\"392.0\" y1=\"8.0\" x2=\"392.0\" y2=\"150.0\"><title>checkpoint 2</title>"
            "</line><polyline class=\"line\" stroke=\"#000\" points=\"46.0,150.0 392.0,8.0\"/></svg></div>");
}

TEST(SvgChartTest, SeveralLinesShareOneAxisAndNameThemselves) {
  ChartSeries up{"", "chosen", "#0a0", {1, 2, 3}, {0.0, 1.0, 2.0}};
  ChartSeries down{"", "rejected", "#a00", {1, 2, 3}, {0.0, -1.0, std::nullopt}};
  const std::string svg = SvgLinesChart("rewards", "rewards", {up, down}, {}, {});
  EXPECT_NE(svg.find("id=\"chart-rewards\""), std::string::npos);
  EXPECT_NE(svg.find("data-points=\"5\""), std::string::npos);
  EXPECT_NE(svg.find(">2</text>"), std::string::npos) << "the top label is the highest of both lines";
  EXPECT_NE(svg.find(">-1</text>"), std::string::npos) << "the bottom label is the lowest of both lines";
  EXPECT_NE(svg.find("data-series=\"chosen\" points=\"46.0,102.7 219.0,55.3 392.0,8.0\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("<span style=\"color:#a00\">rejected</span> -1"), std::string::npos) << svg;
}

TEST(SvgChartTest, NonFiniteValuesAreGapsAndMarksStayInRange) {
  ChartSeries s{"l", "loss", "#000", {1, 2, 3, 4}, {1.0, std::numeric_limits<double>::quiet_NaN(), std::nullopt, 2.0}};
  const std::string svg = SvgLineChart(s, /*commits=*/{2, 99}, /*restarts=*/{3});
  EXPECT_NE(svg.find("data-points=\"2\""), std::string::npos);
  EXPECT_NE(svg.find("checkpoint 2"), std::string::npos);
  EXPECT_EQ(svg.find("checkpoint 99"), std::string::npos);
  EXPECT_NE(svg.find("new attempt from step 3"), std::string::npos);
  EXPECT_NE(SvgLineChart({"e", "empty", "#000", {}, {}}, {}, {}).find("no data"), std::string::npos);
}

}  // namespace
}  // namespace shardd
