#include "coordinator/report/run_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <optional>
#include <utility>

#include "coordinator/jobs/job_manager.h"
#include "coordinator/report/svg_chart.h"
#include "coordinator/server/dashboard_api.h"
#include "proto/codec/metrics_codec.h"
#include "shard/spec/step_metric_fields.h"
#include "shard/common/file_util.h"

namespace shardd {
namespace {

using nlohmann::json;

constexpr const char* kStyle = R"(body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:10px 20px}header b{font-size:18px}header .muted{color:#aab}
main{padding:16px 20px}h2{font-size:15px;margin:20px 0 8px}.muted{color:#778}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e4e6ea;vertical-align:top}
th{background:#eceef2;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600;padding:1px 6px;border-radius:3px;font-size:12px}
.SUCCEEDED{background:#dcf3e2;color:#17683a}.FAILED{background:#fde0e0;color:#a11}
.CANCELLED,.QUEUED{background:#eee;color:#555}.RUNNING,.LAUNCHING,.RESTARTING{background:#dbe9ff;color:#1b4fa8}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:8px}
.card{background:#fff;padding:8px 12px;border-radius:6px;min-width:110px;box-shadow:0 1px 2px #0001}
.card b{display:block;font-size:17px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
.chart{background:#fff;border-radius:6px;padding:8px;box-shadow:0 1px 2px #0001}
.chart h3{margin:0 0 4px;font-size:13px}.chart svg{width:100%;height:170px;display:block}
.chart .line{fill:none;stroke-width:1.6}.chart .axis{stroke:#ccd}.chart text{font-size:10px;fill:#667}
.chart .restart{stroke:#d33;stroke-dasharray:4 3}.chart .commit{stroke:#2a9d55;stroke-opacity:.5}
.legend{font-size:11px;color:#667;margin:6px 0 12px}
.legend i{display:inline-block;width:14px;height:2px;vertical-align:middle;margin:0 4px 0 10px}
pre{background:#fff;padding:10px;white-space:pre-wrap;border-radius:6px})";

std::string Clock(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = unix_ms / 1000;
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string Duration(double s) {
  char buf[32];
  if (s < 0) return "-";
  if (s < 90) std::snprintf(buf, sizeof(buf), "%.1f s", s);
  else if (s < 5400) std::snprintf(buf, sizeof(buf), "%.0f min %02.0f s", std::floor(s / 60), std::fmod(s, 60));
  else std::snprintf(buf, sizeof(buf), "%.0f h %02.0f min", std::floor(s / 3600), std::fmod(s / 60, 60));
  return buf;
}

// The figures a reader looks for first, from the job and its rows.
// Where FinalFigures keeps the last values of a count's figures.
std::string SummaryKey(int64_t shard::StepMetrics::*count) {
  if (count == &shard::StepMetrics::pairs) return "preference";
  if (count == &shard::StepMetrics::eval_pairs) return "preference_eval";
  return std::string(shard::CountName(count)) == "moe_layers" ? "moe" : std::string(shard::CountName(count));
}

json FinalFigures(const RunReportInput& in) {
  const v1::JobStatus& j = in.job;
  json f = {{"state", JobStateName(j.state())},
            {"reason", j.reason()},
            {"steps", j.progress().step()},
            {"total_steps", j.progress().total_steps()},
            {"attempts", j.attempt()},
            {"restarts", j.restarts()},
            {"preemptions", j.progress().preemptions()},
            {"last_committed_step", j.progress().last_committed_step()},
            {"checkpoints", in.checkpoints.size()},
            {"tokens_total", j.progress().tokens_total()},
            {"wall_seconds", j.updated_unix_ms() > j.created_unix_ms()
                                 ? (j.updated_unix_ms() - j.created_unix_ms()) / 1000.0 : 0.0},
            {"final_loss", nullptr},
            {"min_loss", nullptr},
            {"mean_tokens_per_s", nullptr},
            {"mean_step_seconds", nullptr},
            {"eval_loss", nullptr}};
  double tokens = 0, seconds = 0;
  std::optional<double> min_loss;
  for (const v1::MetricRow& r : in.rows) {
    if (std::isfinite(r.loss())) min_loss = min_loss ? std::min(*min_loss, r.loss()) : r.loss();
    tokens += static_cast<double>(r.tokens());
    seconds += r.seconds();
  }
  // The last step's loss as it was: a non-finite one (a step the loss scaler
  // skipped) is said as such, never replaced by an earlier finite figure.
  if (!in.rows.empty()) {
    const v1::MetricRow& last = in.rows.back();
    if (std::isfinite(last.loss())) {
      f["final_loss"] = last.loss();
    } else {
      f["final_loss_not_finite"] = std::string(std::isnan(last.loss()) ? "NaN" : last.loss() > 0 ? "inf" : "-inf") +
                                   " at step " + std::to_string(last.step()) +
                                   (last.skipped() ? " (skipped by the loss scaler)" : "");
    }
  }
  for (const v1::MetricRow& r : in.rows)  // the last evaluation (eval: in the job file)
    if (r.eval_samples() > 0 && std::isfinite(r.eval_loss())) f["eval_loss"] = r.eval_loss();
  if (min_loss) f["min_loss"] = *min_loss;
  if (seconds > 0) {
    f["mean_tokens_per_s"] = tokens / seconds;
    f["mean_step_seconds"] = seconds / static_cast<double>(in.rows.size());
  }
  if (j.progress().mfu() > 0) f["mfu"] = j.progress().mfu();
  // The optional figures (shard/spec/step_metric_fields.h): per count (a
  // preference: job's pairs, its held-out pairs, a sparse model's layers),
  // the last row that had it, under SummaryKey (an SFT job's figures keep
  // their shape: no such key).
  std::vector<shard::StepMetrics> rows;
  for (const v1::MetricRow& r : in.rows) rows.push_back(FromMetricRow(r));
  for (const shard::StepMetricField& fig : shard::StepMetricFields()) {
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      const shard::StepMetrics& r = *it;
      if (r.*fig.present_if <= 0) continue;
      json& p = f[SummaryKey(fig.present_if)];
      if (p.is_null())
        p = json{{"step", r.step}, {std::string(shard::CountName(fig.present_if)), r.*fig.present_if}};
      const double v = r.*fig.value;
      p[std::string(fig.name)] = std::isfinite(v) ? json(v) : json(nullptr);
      break;
    }
  }
  return f;
}

std::string Card(const std::string& label, const std::string& value) {
  return "<div class=\"card\"><span class=\"muted\">" + HtmlEscape(label) + "</span><b>" + HtmlEscape(value) +
         "</b></div>";
}

std::string Cards(const json& f) {
  auto num = [](const json& v, const char* unit = "") {
    return v.is_null() ? std::string("-") : ShortNumber(v.get<double>()) + unit;
  };
  std::string out = "<div class=\"cards\" id=\"final\">";
  out += Card("steps", std::to_string(f["steps"].get<int64_t>()) + " / " + std::to_string(f["total_steps"].get<int64_t>()));
  out += Card("final loss", f.contains("final_loss_not_finite") ? f["final_loss_not_finite"].get<std::string>()
                                                                 : num(f["final_loss"]));
  out += Card("lowest loss", num(f["min_loss"]));
  out += Card("eval loss", f["eval_loss"].is_null() ? "not recorded" : num(f["eval_loss"]));
  out += Card("tokens/s (mean)", num(f["mean_tokens_per_s"]));
  out += Card("step time (mean)", num(f["mean_step_seconds"], " s"));
  out += Card("tokens trained", std::to_string(f["tokens_total"].get<int64_t>()));
  out += Card("wall time", Duration(f["wall_seconds"].get<double>()));
  out += Card("attempts", std::to_string(f["attempts"].get<int>()) + " (" + std::to_string(f["restarts"].get<int>()) +
                              " restart(s))");
  out += Card("last commit", f["last_committed_step"].get<int64_t>() < 0
                                 ? std::string("none") : "step " + std::to_string(f["last_committed_step"].get<int64_t>()));
  if (f.contains("mfu")) out += Card("MFU", num(f["mfu"].get<double>() * 100, " %"));
  for (const shard::StepMetricField& fig : shard::StepMetricFields()) {  // TRL's names, as TensorBoard says them
    const std::string key = SummaryKey(fig.present_if), name(fig.name);
    if (fig.chart.empty() || !f.contains(key) || !f[key].contains(name)) continue;
    const json& v = f[key][name];
    out += Card(std::string(fig.display),
                fig.unit == "share" ? (v.is_null() ? std::string("-") : num(v.get<double>() * 100, " %")) : num(v));
  }
  return out + "</div>";
}

ChartSeries Series(const json& m, const char* key, const char* id, const char* title, const char* color,
                   bool log = false) {
  ChartSeries s{id, title, color, {}, {}, log};
  for (size_t i = 0; i < m["steps"].size(); ++i) {
    s.steps.push_back(m["steps"][i].get<int64_t>());
    const json& v = m[key][i];
    s.values.push_back(v.is_null() ? std::nullopt : std::optional<double>(v.get<double>()));
  }
  return s;
}

// One chart per chart group of the optional figures (step_metric_fields.h)
// that the rows carry: a training figure from the dashboard's downsampled
// series (dashboard_api.h), an evaluation's at the steps it ran. A group of
// one figure is a chart with the figure's name as id; a larger one has the
// group's name and a line per figure.
std::string FigureCharts(const json& m, const std::vector<v1::MetricRow>& api_rows,
                         const std::vector<int64_t>& commits, const std::vector<int64_t>& restarts) {
  std::vector<shard::StepMetrics> rows;
  for (const v1::MetricRow& r : api_rows) rows.push_back(FromMetricRow(r));
  auto figure_series = [&](const shard::StepMetricField& fig, const std::string& id, const std::string& title) {
    const std::string name(fig.name), color(fig.color);
    if (fig.split == shard::MetricSplit::kTrain) return Series(m, name.c_str(), id.c_str(), title.c_str(), color.c_str());
    ChartSeries s{id, title, color, {}, {}, false};
    for (const shard::StepMetrics& r : rows)
      if (r.*fig.present_if > 0) {
        s.steps.push_back(r.step);
        const double v = r.*fig.value;
        s.values.push_back(std::isfinite(v) ? std::optional<double>(v) : std::nullopt);
      }
    return s;
  };
  std::string out;
  std::vector<std::string_view> done;
  const auto fields = shard::StepMetricFields();
  for (const shard::StepMetricField& head : fields) {
    if (head.chart.empty() || !m.contains(std::string(head.name)) ||
        std::find(done.begin(), done.end(), head.chart) != done.end())
      continue;
    done.push_back(head.chart);
    std::vector<const shard::StepMetricField*> group;
    for (const shard::StepMetricField& g : fields)
      if (g.chart == head.chart) group.push_back(&g);
    const std::string where = head.split == shard::MetricSplit::kTrain ? " (train)" : " (eval, held out)";
    if (group.size() == 1) {
      out += SvgLineChart(figure_series(head, std::string(head.name), std::string(head.display) + where), commits,
                          restarts);
      continue;
    }
    std::vector<ChartSeries> lines;
    for (const shard::StepMetricField* g : group) lines.push_back(figure_series(*g, "", std::string(g->series)));
    out += SvgLinesChart(std::string(head.chart), std::string(head.chart) + where, lines, commits, restarts);
  }
  return out;
}

std::string Charts(const json& m, const std::vector<v1::MetricRow>& rows) {
  const auto commits = m["commits"].get<std::vector<int64_t>>();
  const auto restarts = m["restarts"].get<std::vector<int64_t>>();
  std::string out = "<div class=\"charts\">";
  out += SvgLineChart(Series(m, "loss", "loss", "train loss", "#2a62c9"), commits, restarts);
  // Held-out loss at the steps an evaluation ran (eval.every_steps).
  ChartSeries eval{"eval_loss", "eval loss (held out)", "#d0562a", {}, {}, false};
  for (const v1::MetricRow& r : rows)
    if (r.eval_samples() > 0 && std::isfinite(r.eval_loss())) {
      eval.steps.push_back(r.step());
      eval.values.push_back(r.eval_loss());
    }
  if (!eval.steps.empty()) out += SvgLineChart(eval, commits, restarts);
  out += FigureCharts(m, rows, commits, restarts);
  out += SvgLineChart(Series(m, "tokens_per_s", "tokens_per_s", "tokens/s", "#8a4fd0"), commits, restarts);
  out += SvgLineChart(Series(m, "lr", "lr", "learning rate", "#c97a2a"), commits, restarts);
  out += SvgLineChart(Series(m, "grad_norm", "grad_norm", "gradient norm", "#2a9d8f", true), commits, restarts);
  const bool scaler = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.loss_scale() != 1.0; });
  if (scaler) out += SvgLineChart(Series(m, "loss_scale", "loss_scale", "loss scale", "#a33", true), commits, restarts);
  out += "</div><div class=\"legend\"><i style=\"background:#2a9d55\"></i>checkpoint committed"
         "<i style=\"background:#d33\"></i>new attempt (restart or preemption) resumed here</div>";
  if (eval.steps.empty())
    out += "<p class=\"muted\" id=\"eval-note\">Eval loss: not recorded (the job has no eval: section; "
           "<code>shardctl eval</code> scores a checkpoint offline).</p>";
  return out;
}

std::string EventsTable(const std::vector<v1::JobEvent>& events) {
  std::string out = "<table id=\"events\"><tr><th>time</th><th>attempt</th><th>state</th><th>event</th><th>message</th></tr>";
  for (const auto& e : events) {
    std::string msg = e.message();
    if (e.kind() == "submitted" && msg.size() > 200) msg = msg.substr(0, msg.find('\n')) + " (plan below)";
    out += "<tr><td>" + Clock(e.unix_ms()) + "</td><td class=\"num\">" + std::to_string(e.attempt()) + "</td><td>" +
           JobStateName(e.state()) + "</td><td>" + HtmlEscape(e.kind()) + "</td><td>" + HtmlEscape(msg) + "</td></tr>";
  }
  return out + "</table>";
}

std::string CheckpointsTable(const std::vector<v1::CheckpointInfo>& cks) {
  if (cks.empty()) return "<p class=\"muted\">none</p>";
  std::string out = "<table id=\"checkpoints\"><tr><th>step</th><th>world</th><th>files</th><th>MB</th><th>committed</th>"
                    "<th>path</th></tr>";
  for (const auto& c : cks)
    out += "<tr><td class=\"num\">" + std::to_string(c.step()) + "</td><td class=\"num\">" + std::to_string(c.world()) +
           "</td><td class=\"num\">" + std::to_string(c.files()) + "</td><td class=\"num\">" +
           ShortNumber(static_cast<double>(c.bytes()) / 1e6) + "</td><td>" + Clock(c.committed_unix_ms()) +
           "</td><td>" + HtmlEscape(c.path()) + (c.problem().empty() ? "" : " (" + HtmlEscape(c.problem()) + ")") +
           "</td></tr>";
  return out + "</table>";
}

// JSON inside <script>: "</" would end the element early.
std::string ScriptSafe(std::string s) {
  for (size_t p = 0; (p = s.find("</", p)) != std::string::npos; p += 3) s.replace(p, 2, "<\\/");
  return s;
}

}  // namespace

std::string RunReportHtml(const RunReportInput& in, int max_points) {
  const v1::JobStatus& j = in.job;
  json job = JobJson(j, in.events, in.checkpoints);
  json metrics = MetricsJson(in.rows, in.checkpoints, max_points);
  json final = FinalFigures(in);
  json data = {{"job", job}, {"metrics", metrics}, {"final", final}, {"generated_unix_ms", in.generated_unix_ms}};
  const std::string state = JobStateName(j.state());
  std::string html = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>shardd run report: " +
                     HtmlEscape(j.id()) + "</title><style>" + kStyle + "</style></head><body>";
  html += "<header><b>shardd run report</b> <span class=\"muted\">generated " + Clock(in.generated_unix_ms) +
          "</span></header><main>";
  html += "<h1 id=\"title\">" + HtmlEscape(j.id()) + " <span class=\"muted\">" + HtmlEscape(j.name()) +
          "</span> <span class=\"state " + state + "\">" + state + "</span></h1>";
  if (!j.reason().empty()) html += "<p id=\"reason\">" + HtmlEscape(j.reason()) + "</p>";
  html += "<p class=\"muted\">" + std::to_string(j.world_size()) + " rank(s), launcher " + HtmlEscape(j.launcher()) +
          "; submitted " + Clock(j.created_unix_ms()) + ", ended " + Clock(j.updated_unix_ms()) + "; run directory " +
          HtmlEscape(j.checkpoint_dir()) + "</p>";
  html += "<h2>Final figures</h2>" + Cards(final);
  html += "<h2>Curves</h2>" + Charts(metrics, in.rows);
  html += "<h2>Events</h2>" + EventsTable(in.events);
  html += "<h2>Checkpoints</h2>" + CheckpointsTable(in.checkpoints);
  html += "<h2>Plan</h2><pre id=\"plan\">" +
          HtmlEscape(job.contains("plan") ? job["plan"].get<std::string>() : std::string("(not recorded)")) + "</pre>";
  html += "<script type=\"application/json\" id=\"report-data\">" + ScriptSafe(data.dump(-1, ' ', false, json::error_handler_t::replace)) + "</script>";
  return html + "</main></body></html>\n";
}

shard::Status WriteRunReport(const RunReportInput& in, const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return shard::NotFound("cannot create " + parent.string() + " for the run report: " + ec.message());
  return shard::WriteFileAtomic(path, RunReportHtml(in));
}

}  // namespace shardd
