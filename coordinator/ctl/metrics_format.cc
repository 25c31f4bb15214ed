#include "coordinator/ctl/metrics_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "proto/codec/metrics_codec.h"
#include "shard/spec/step_metric_fields.h"

namespace shardctl {
namespace {

using shard::MetricSplit;
using shard::StepMetricField;
using shard::StepMetrics;

// The optional figures (shard/spec/step_metric_fields.h) shown for these
// rows: those whose count some row has (a preference: job's pairs, ...), and
// of a figure that may be absent as 0 (orpo's nll) only when some row has one.
// The table's headers and the JSON keys are the figures' display names
// (TRL's rewards/chosen, ...).
std::vector<const StepMetricField*> ShownFigures(const std::vector<StepMetrics>& rows, bool json) {
  std::vector<const StepMetricField*> out;
  for (const StepMetricField& f : shard::StepMetricFields()) {
    const bool shown = std::any_of(rows.begin(), rows.end(), [&](const StepMetrics& m) {
      return json ? m.*f.present_if > 0 : shard::FigurePresent(m, f);
    });
    if (shown) out.push_back(&f);
  }
  return out;
}

std::vector<StepMetrics> Figures(const std::vector<shardd::v1::MetricRow>& rows) {
  std::vector<StepMetrics> out;
  for (const auto& r : rows) out.push_back(shardd::FromMetricRow(r));
  return out;
}

// As wide as the name, and at least as the other columns (10).
int Width(const StepMetricField& f) { return std::max(10, static_cast<int>(f.display.size())); }

void FigureHeaders(const std::vector<const StepMetricField*>& shown, MetricSplit split, std::string* out) {
  char buf[256];
  for (const StepMetricField* f : shown)
    if (f->split == split) {
      std::snprintf(buf, sizeof(buf), " %-*s", Width(*f), std::string(f->display).c_str());
      *out += buf;
    }
}

void FigureCells(const std::vector<const StepMetricField*>& shown, MetricSplit split, const StepMetrics& m,
                 std::string* out) {
  char buf[256];
  for (const StepMetricField* f : shown)
    if (f->split == split) {
      if (m.*f->present_if > 0) std::snprintf(buf, sizeof(buf), " %-*.4f", Width(*f), m.*f->value);
      else std::snprintf(buf, sizeof(buf), " %-*s", Width(*f), "");
      *out += buf;
    }
}

}  // namespace

std::string MetricsTable(const std::vector<shardd::v1::MetricRow>& rows) {
  bool scaler = false;
  bool eval = false, exact = false;  // columns only for jobs with an eval section
  const std::vector<StepMetrics> figures = Figures(rows);
  const std::vector<const StepMetricField*> shown = ShownFigures(figures, /*json=*/false);
  for (const auto& r : rows) {
    scaler = scaler || r.skipped() || (r.loss_scale() != 0 && r.loss_scale() != 1);
    eval = eval || r.eval_samples() > 0;
    exact = exact || (r.eval_samples() > 0 && r.eval_exact_match() >= 0);
  }
  std::string out;
  auto end_line = [&out] {
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  };
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-10s %-10s %-11s %-10s %-10s", "STEP", "LOSS", "LR", "GRAD_NORM", "TOKENS/S");
  out += buf;
  FigureHeaders(shown, MetricSplit::kTrain, &out);
  if (eval) out += " EVAL_LOSS ";
  if (exact) out += " EXACT_MATCH";
  FigureHeaders(shown, MetricSplit::kEval, &out);
  if (scaler) out += " SCALE      SKIPPED";
  end_line();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::snprintf(buf, sizeof(buf), "%-10lld %-10.4f %-11.3e %-10.4f %-10.0f", static_cast<long long>(r.step()),
                  r.loss(), r.lr(), r.grad_norm(), r.tokens_per_s());
    out += buf;
    FigureCells(shown, MetricSplit::kTrain, figures[i], &out);
    if (eval) {
      if (r.eval_samples() > 0) std::snprintf(buf, sizeof(buf), " %-10.4f", r.eval_loss());
      else std::snprintf(buf, sizeof(buf), " %-10s", "");
      out += buf;
    }
    if (exact) {
      if (r.eval_samples() > 0 && r.eval_exact_match() >= 0) std::snprintf(buf, sizeof(buf), " %-11.3f", r.eval_exact_match());
      else std::snprintf(buf, sizeof(buf), " %-11s", "");
      out += buf;
    }
    FigureCells(shown, MetricSplit::kEval, figures[i], &out);
    if (scaler) {
      std::snprintf(buf, sizeof(buf), " %-10g %s", r.loss_scale(), r.skipped() ? "yes" : "");
      out += buf;
    }
    end_line();
  }
  return out;
}

std::string MetricsJsonLines(const std::vector<shardd::v1::MetricRow>& rows) {
  const std::vector<StepMetrics> figures = Figures(rows);
  const std::vector<const StepMetricField*> shown = ShownFigures(figures, /*json=*/true);
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const StepMetrics& m = figures[i];
    // dump() writes a NaN or infinite double as null: JSON has neither.
    nlohmann::ordered_json j = {{"step", r.step()},
                                {"attempt", r.attempt()},
                                {"loss", r.loss()},
                                {"lr", r.lr()},
                                {"grad_norm", r.grad_norm()},
                                {"tokens", r.tokens()},
                                {"seconds", r.seconds()},
                                {"tokens_per_s", r.tokens_per_s()},
                                {"skipped", r.skipped()},
                                {"loss_scale", r.loss_scale()}};
    // One shape for every row: a step without an evaluation has 0 samples
    // and null figures.
    const bool evaluated = r.eval_samples() > 0;
    j["eval_samples"] = r.eval_samples();
    j["eval_loss"] = evaluated ? nlohmann::ordered_json(r.eval_loss()) : nlohmann::ordered_json(nullptr);
    j["eval_exact_match"] = evaluated && r.eval_exact_match() >= 0 ? nlohmann::ordered_json(r.eval_exact_match())
                                                                   : nlohmann::ordered_json(nullptr);
    // Then each shown figure's count and the figures under it (an SFT job's
    // rows keep their shape; null where this row has none).
    int64_t StepMetrics::*count = nullptr;
    for (const StepMetricField* f : shown) {
      if (f->present_if != count) {
        count = f->present_if;
        j[std::string(shard::CountName(count))] = m.*count;
      }
      j[std::string(f->display)] = m.*count > 0 ? nlohmann::ordered_json(m.*f->value) : nlohmann::ordered_json(nullptr);
    }
    if (!m.expert_load.empty()) {  // a sparse model: per layer, each expert's share of the routed slots
      nlohmann::ordered_json layers = nlohmann::ordered_json::array();
      for (size_t l = 0; l < m.expert_load.size(); l += m.moe_experts)
        layers.push_back(std::vector<double>(m.expert_load.begin() + l, m.expert_load.begin() + l + m.moe_experts));
      j["moe/expert_load"] = std::move(layers);
    }
    out += j.dump();
    out += "\n";
  }
  return out;
}

}  // namespace shardctl
