#include "coordinator/ctl/metrics_format.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace shardctl {

std::string MetricsTable(const std::vector<shardd::v1::MetricRow>& rows) {
  bool scaler = false;
  bool eval = false, exact = false;  // columns only for jobs with an eval section
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
  if (eval) out += " EVAL_LOSS ";
  if (exact) out += " EXACT_MATCH";
  if (scaler) out += " SCALE      SKIPPED";
  end_line();
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof(buf), "%-10lld %-10.4f %-11.3e %-10.4f %-10.0f", static_cast<long long>(r.step()),
                  r.loss(), r.lr(), r.grad_norm(), r.tokens_per_s());
    out += buf;
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
    if (scaler) {
      std::snprintf(buf, sizeof(buf), " %-10g %s", r.loss_scale(), r.skipped() ? "yes" : "");
      out += buf;
    }
    end_line();
  }
  return out;
}

std::string MetricsJsonLines(const std::vector<shardd::v1::MetricRow>& rows) {
  std::string out;
  for (const auto& r : rows) {
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
    out += j.dump();
    out += "\n";
  }
  return out;
}

}  // namespace shardctl
