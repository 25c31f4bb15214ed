// Every row of the step-metric table (shard/spec/step_metric_fields.h)
// reaches every sink the coordinator and shardctl drive from it: the wire
// (both messages, both ways, and a worker/client that knows only the older
// per-figure fields), the state store, shardctl metrics (table and --json),
// the dashboard API (series and /api/metric_fields), the run report, the
// job's progress and its Prometheus gauges. Each figure gets its own value,
// so a sink that drops or swaps one fails here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/ctl/json_schema.h"
#include "coordinator/ctl/metrics_format.h"
#include "coordinator/report/run_report.h"
#include "coordinator/server/dashboard_api.h"
#include "coordinator/server/metrics_page.h"
#include "coordinator/state/state_store.h"
#include "proto/codec/metrics_codec.h"
#include "shard/spec/step_metric_fields.h"
#include "tests/unit/coordinator/coordinator_test_util.h"

namespace shardd::testing {
namespace {

using shard::StepMetricField;
using shard::StepMetricFields;

// A step that carries every figure: each count set, each figure 0.01 * (its row + 1).
shard::StepMetrics EveryFigure(int64_t step) {
  shard::StepMetrics m;
  m.step = step;
  m.attempt = 1;
  m.loss = 1;
  m.tokens = 64;
  m.seconds = 0.5;
  m.pairs = 4;
  m.eval_pairs = m.eval_samples = 2;
  m.moe_experts = 2;
  m.expert_load = {0.75, 0.25, 0.5, 0.5};
  m.moe_layers = 2;
  double v = 0;
  for (const StepMetricField& f : StepMetricFields()) m.*f.value = (v += 0.01);
  return m;
}

void ExpectSameFigures(const shard::StepMetrics& a, const shard::StepMetrics& b, const std::string& where) {
  for (const StepMetricField& f : StepMetricFields())
    EXPECT_DOUBLE_EQ(a.*f.value, b.*f.value) << where << ": " << f.name;
  EXPECT_EQ(a.expert_load, b.expert_load) << where;
  EXPECT_EQ(a.moe_layers, b.moe_layers) << where;
}

TEST(MetricFieldsSinksTest, TheTableIsWellFormed) {
  ASSERT_FALSE(StepMetricFields().empty());
  for (const StepMetricField& f : StepMetricFields()) {
    EXPECT_EQ(shard::FindStepMetricField(f.name), &f) << f.name << " is named twice";
    EXPECT_FALSE(f.display.empty()) << f.name;
    EXPECT_FALSE(f.meaning.empty()) << f.name;
    EXPECT_NE(f.present_if, nullptr) << f.name;
    EXPECT_GE(f.store_since, 1) << f.name;
  }
}

TEST(MetricFieldsSinksTest, TheWireCarriesEveryFigureBothWays) {
  const shard::StepMetrics m = EveryFigure(3);
  const v1::StepMetric s = ToStepMetric(m);
  for (const StepMetricField& f : StepMetricFields()) EXPECT_TRUE(s.figures().contains(std::string(f.name))) << f.name;
  ExpectSameFigures(m, FromStepMetric(s, 1), "StepMetric");
  const v1::MetricRow r = ToMetricRow(m);
  ExpectSameFigures(m, FromMetricRow(r), "MetricRow");
  // The worker's message (protocol 3) names no figure: the map carries them all.
  for (const StepMetricField& f : StepMetricFields())
    EXPECT_EQ(v1::StepMetric::descriptor()->FindFieldByName(std::string(f.name)), nullptr) << f.name;
  // A served row still carries the older figures' own fields (older shardctl
  // clients read them), and a row without the map (an older coordinator's) still reads.
  v1::MetricRow old = r;
  old.clear_figures();
  const shard::StepMetrics back = FromMetricRow(old);
  EXPECT_DOUBLE_EQ(back.rewards_chosen, m.rewards_chosen);
  EXPECT_DOUBLE_EQ(back.eval_nll, m.eval_nll);
  // A step without a figure's count sends none of its figures.
  shard::StepMetrics sft = m;
  sft.pairs = sft.eval_pairs = sft.moe_layers = 0;
  sft.expert_load.clear();
  EXPECT_TRUE(ToStepMetric(sft).figures().empty());
}

class MetricFieldsStoreTest : public ScratchTest {};

TEST_F(MetricFieldsStoreTest, TheStoreKeepsEveryFigure) {
  auto s = StateStore::Open(Path("state"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const shard::StepMetrics m = EveryFigure(5);
  ASSERT_TRUE((*s)->PutMetrics("job-1", {m}).ok());
  auto rows = (*s)->LoadMetrics("job-1", {});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  ExpectSameFigures(m, (*rows)[0], "store");
}

TEST(MetricFieldsSinksTest, ShardctlMetricsShowsEveryFigure) {
  const v1::MetricRow r = ToMetricRow(EveryFigure(7));
  const std::string table = shardctl::MetricsTable({r});
  const auto j = nlohmann::json::parse(shardctl::MetricsJsonLines({r}));
  for (const StepMetricField& f : StepMetricFields()) {
    EXPECT_NE(table.find(std::string(f.display)), std::string::npos) << f.display << "\n" << table;
    ASSERT_TRUE(j.contains(std::string(f.display))) << f.display;
    EXPECT_DOUBLE_EQ(j[std::string(f.display)].get<double>(), EveryFigure(7).*f.value) << f.display;
  }
}

TEST(MetricFieldsSinksTest, TheDashboardApiAndReportServeEveryFigure) {
  const std::vector<v1::MetricRow> rows = {ToMetricRow(EveryFigure(1)), ToMetricRow(EveryFigure(2))};
  const nlohmann::json m = MetricsJson(rows, {}, 100);
  const nlohmann::json fields = MetricFieldsJson();
  ASSERT_EQ(fields.size(), StepMetricFields().size());
  RunReportInput in;
  in.job.set_id("job-1");
  in.rows = rows;
  const std::string html = RunReportHtml(in);
  size_t i = 0;
  for (const StepMetricField& f : StepMetricFields()) {
    const std::string name(f.name);
    ASSERT_TRUE(m.contains(name)) << name;
    EXPECT_DOUBLE_EQ(m[name][1].get<double>(), EveryFigure(2).*f.value) << name;
    EXPECT_EQ(fields[i++]["name"], name);
    EXPECT_NE(html.find("\"" + name + "\""), std::string::npos) << name << " is not in the report";
  }
  EXPECT_EQ(m["expert_load"]["layers"], 2);
}

TEST(MetricFieldsSinksTest, ProgressAndPrometheusShowEveryTrainingFigure) {
  v1::JobStatus st;
  st.set_id("job-1");
  st.set_state(v1::RUNNING);
  PutProgressFigures(ToStepMetric(EveryFigure(9)), st.mutable_progress());
  const nlohmann::json job = shardctl::JobObject(st);
  JobTelemetry t;
  t.status = st;
  const std::string page = RenderMetrics({t}, "test");
  for (const StepMetricField& f : StepMetricFields()) {
    if (f.split != shard::MetricSplit::kTrain) continue;
    const std::string name(f.name);
    EXPECT_DOUBLE_EQ(job["progress"][name].get<double>(), EveryFigure(9).*f.value) << name;
    EXPECT_NE(page.find("\nshardd_job_" + name + "{job_id=\"job-1\"} "), std::string::npos) << name << "\n" << page;
  }
}

}  // namespace
}  // namespace shardd::testing
