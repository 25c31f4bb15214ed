// The run report page: its embedded data parses back with the curves'
// points (downsampled to the budget), the SVG charts draw exactly those
// points, a message holding "</script>" or markup cannot break out of the
// page, the loss-scale chart appears only when a scaler ran, and the final
// figures come from the rows.
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
