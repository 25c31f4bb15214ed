#include "coordinator/ctl/metrics_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace shardctl {
namespace {

// A preference: job's figures under TRL's names (rewards/chosen, ...): the
// table's headers and the JSON keys. nll is ORPO's (0 for dpo and ipo).
struct PreferenceColumn {
  const char* name;
  double (shardd::v1::MetricRow::*get)() const;
  bool orpo_only = false;  // a table column only when some row has one
};
constexpr PreferenceColumn kPreferenceColumns[] = {
    {"rewards/chosen", &shardd::v1::MetricRow::rewards_chosen},
    {"rewards/rejected", &shardd::v1::MetricRow::rewards_rejected},
    {"rewards/accuracies", &shardd::v1::MetricRow::rewards_accuracies},
    {"rewards/margins", &shardd::v1::MetricRow::rewards_margins},
    {"logps/chosen", &shardd::v1::MetricRow::logps_chosen},
    {"logps/rejected", &shardd::v1::MetricRow::logps_rejected},
    {"nll", &shardd::v1::MetricRow::nll, true},
};
// The same figures on the held-out pairs (eval: in a preference: job), under
// TRL's eval/ names; on the steps with eval_pairs > 0.
constexpr PreferenceColumn kEvalPreferenceColumns[] = {
    {"eval/rewards/chosen", &shardd::v1::MetricRow::eval_rewards_chosen},
    {"eval/rewards/rejected", &shardd::v1::MetricRow::eval_rewards_rejected},
    {"eval/rewards/accuracies", &shardd::v1::MetricRow::eval_rewards_accuracies},
    {"eval/rewards/margins", &shardd::v1::MetricRow::eval_rewards_margins},
    {"eval/logps/chosen", &shardd::v1::MetricRow::eval_logps_chosen},
    {"eval/logps/rejected", &shardd::v1::MetricRow::eval_logps_rejected},
    {"eval/nll", &shardd::v1::MetricRow::eval_nll, true},
};

// As wide as the name, and at least as the other columns (10).
int Width(const PreferenceColumn& c) { return std::max(10, static_cast<int>(std::strlen(c.name))); }

// A preference job reports pairs on every step; an SFT job on none.
bool PreferenceJob(const std::vector<shardd::v1::MetricRow>& rows) {
  for (const auto& r : rows)
    if (r.pairs() > 0) return true;
  return false;
}

// Some step evaluated held-out pairs.
bool PairEvalJob(const std::vector<shardd::v1::MetricRow>& rows) {
  for (const auto& r : rows)
    if (r.eval_pairs() > 0) return true;
  return false;
}

}  // namespace

std::string MetricsTable(const std::vector<shardd::v1::MetricRow>& rows) {
  bool scaler = false;
  bool eval = false, exact = false;  // columns only for jobs with an eval section
  const bool preference = PreferenceJob(rows);
  const bool pair_eval = PairEvalJob(rows);
  bool orpo = false, eval_orpo = false;  // nll: only ORPO reports one
  for (const auto& r : rows) {
    orpo = orpo || (r.pairs() > 0 && r.nll() != 0);
    eval_orpo = eval_orpo || (r.eval_pairs() > 0 && r.eval_nll() != 0);
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
  auto shown = [&](const PreferenceColumn& c) { return !c.orpo_only || orpo; };
  if (preference)
    for (const PreferenceColumn& c : kPreferenceColumns)
      if (shown(c)) {
        std::snprintf(buf, sizeof(buf), " %-*s", Width(c), c.name);
        out += buf;
      }
  if (eval) out += " EVAL_LOSS ";
  if (exact) out += " EXACT_MATCH";
  auto eval_shown = [&](const PreferenceColumn& c) { return !c.orpo_only || eval_orpo; };
  if (pair_eval)
    for (const PreferenceColumn& c : kEvalPreferenceColumns)
      if (eval_shown(c)) {
        std::snprintf(buf, sizeof(buf), " %-*s", Width(c), c.name);
        out += buf;
      }
  if (scaler) out += " SCALE      SKIPPED";
  end_line();
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof(buf), "%-10lld %-10.4f %-11.3e %-10.4f %-10.0f", static_cast<long long>(r.step()),
                  r.loss(), r.lr(), r.grad_norm(), r.tokens_per_s());
    out += buf;
    if (preference)
      for (const PreferenceColumn& c : kPreferenceColumns)
        if (shown(c)) {
          if (r.pairs() > 0) std::snprintf(buf, sizeof(buf), " %-*.4f", Width(c), (r.*c.get)());
          else std::snprintf(buf, sizeof(buf), " %-*s", Width(c), "");
          out += buf;
        }
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
    if (pair_eval)
      for (const PreferenceColumn& c : kEvalPreferenceColumns)
        if (eval_shown(c)) {
          if (r.eval_pairs() > 0) std::snprintf(buf, sizeof(buf), " %-*.4f", Width(c), (r.*c.get)());
          else std::snprintf(buf, sizeof(buf), " %-*s", Width(c), "");
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
  const bool preference = PreferenceJob(rows);
  const bool pair_eval = PairEvalJob(rows);
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
    if (preference) {  // an SFT job's rows keep their shape
      j["pairs"] = r.pairs();
      for (const PreferenceColumn& c : kPreferenceColumns)
        j[c.name] = r.pairs() > 0 ? nlohmann::ordered_json((r.*c.get)()) : nlohmann::ordered_json(nullptr);
    }
    if (pair_eval) {  // likewise the rows of a job that never evaluated pairs
      j["eval_pairs"] = r.eval_pairs();
      for (const PreferenceColumn& c : kEvalPreferenceColumns)
        j[c.name] = r.eval_pairs() > 0 ? nlohmann::ordered_json((r.*c.get)()) : nlohmann::ordered_json(nullptr);
    }
    out += j.dump();
    out += "\n";
  }
  return out;
}

}  // namespace shardctl
