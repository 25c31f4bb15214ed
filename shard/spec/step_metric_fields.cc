#include "shard/spec/step_metric_fields.h"

#include <cstdio>

namespace shard {
namespace {

using M = StepMetrics;
constexpr auto kTrain = MetricSplit::kTrain;
constexpr auto kEval = MetricSplit::kEval;
constexpr const char* kGreen = "#17683a";
constexpr const char* kRed = "#a61b1b";
constexpr const char* kBlue = "#1f5fa8";
constexpr const char* kGrey = "#555555";

// clang-format off
constexpr StepMetricField kFields[] = {
    // A preference: step (docs/preference.md): TRL's metrics, means over the step's pairs.
    {"rewards_chosen", "rewards/chosen", "", "implicit reward of the chosen replies", kTrain, "rewards", "chosen", kGreen, &M::rewards_chosen, &M::pairs, false, 1},
    {"rewards_rejected", "rewards/rejected", "", "implicit reward of the rejected replies", kTrain, "rewards", "rejected", kRed, &M::rewards_rejected, &M::pairs, false, 1},
    {"rewards_accuracies", "rewards/accuracies", "share", "share of pairs whose chosen reward beats the rejected", kTrain, "accuracy", "accuracy", kGreen, &M::rewards_accuracies, &M::pairs, false, 1},
    {"rewards_margins", "rewards/margins", "", "chosen minus rejected reward", kTrain, "rewards", "margins", kBlue, &M::rewards_margins, &M::pairs, false, 1},
    {"logps_chosen", "logps/chosen", "nats", "log-prob of the chosen reply (dpo: sum; ipo, orpo: per token)", kTrain, "logps", "chosen", kGreen, &M::logps_chosen, &M::pairs, false, 1},
    {"logps_rejected", "logps/rejected", "nats", "log-prob of the rejected reply", kTrain, "logps", "rejected", kRed, &M::logps_rejected, &M::pairs, false, 1},
    {"nll", "nll", "nats/token", "orpo: the chosen replies' mean token NLL", kTrain, "", "nll", kGrey, &M::nll, &M::pairs, true, 1},
    // eval: on a preference: job's held-out pairs, TRL's eval/ metrics.
    {"eval_rewards_chosen", "eval/rewards/chosen", "", "held-out pairs: implicit reward of the chosen replies", kEval, "eval_rewards", "chosen", kGreen, &M::eval_rewards_chosen, &M::eval_pairs, false, 1},
    {"eval_rewards_rejected", "eval/rewards/rejected", "", "held-out pairs: implicit reward of the rejected replies", kEval, "eval_rewards", "rejected", kRed, &M::eval_rewards_rejected, &M::eval_pairs, false, 1},
    {"eval_rewards_accuracies", "eval/rewards/accuracies", "share", "held-out pairs: share whose chosen reward beats the rejected", kEval, "eval_accuracy", "accuracy", kGreen, &M::eval_rewards_accuracies, &M::eval_pairs, false, 1},
    {"eval_rewards_margins", "eval/rewards/margins", "", "held-out pairs: chosen minus rejected reward", kEval, "eval_rewards", "margins", kBlue, &M::eval_rewards_margins, &M::eval_pairs, false, 1},
    {"eval_logps_chosen", "eval/logps/chosen", "nats", "held-out pairs: log-prob of the chosen reply", kEval, "eval_logps", "chosen", kGreen, &M::eval_logps_chosen, &M::eval_pairs, false, 1},
    {"eval_logps_rejected", "eval/logps/rejected", "nats", "held-out pairs: log-prob of the rejected reply", kEval, "eval_logps", "rejected", kRed, &M::eval_logps_rejected, &M::eval_pairs, false, 1},
    {"eval_nll", "eval/nll", "nats/token", "held-out pairs, orpo: the chosen replies' mean token NLL", kEval, "", "nll", kGrey, &M::eval_nll, &M::eval_pairs, true, 1},
    // A sparse (MoE) model (docs/moe.md): the router's balance.
    {"moe_aux_loss", "moe/aux_loss", "", "load-balancing loss of the router (mean over micro-batches)", kTrain, "moe", "aux loss", kBlue, &M::moe_aux_loss, &M::moe_layers, false, 2},
    {"moe_imbalance_max", "moe/imbalance_max", "ratio", "busiest expert's share over the mean share, worst layer (1 = even)", kTrain, "moe_imbalance", "max", kRed, &M::moe_imbalance_max, &M::moe_layers, false, 2},
    {"moe_imbalance_mean", "moe/imbalance_mean", "ratio", "busiest expert's share over the mean share, mean over layers", kTrain, "moe_imbalance", "mean", kGreen, &M::moe_imbalance_mean, &M::moe_layers, false, 2},
};
// clang-format on

}  // namespace

std::span<const StepMetricField> StepMetricFields() { return kFields; }

std::string_view CountName(int64_t StepMetrics::*count) {
  if (count == &M::pairs) return "pairs";
  if (count == &M::eval_pairs) return "eval_pairs";
  if (count == &M::moe_layers) return "moe_layers";
  return "count";
}

const StepMetricField* FindStepMetricField(std::string_view name) {
  for (const StepMetricField& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

bool FigurePresent(const StepMetrics& m, const StepMetricField& f) {
  return m.*f.present_if > 0 && !(f.zero_is_absent && m.*f.value == 0);
}

std::string FormatFigures(const StepMetrics& m, MetricSplit split) {
  std::string out;
  for (const StepMetricField& f : kFields) {
    if (f.split != split || !FigurePresent(m, f)) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", m.*f.value);
    if (!out.empty()) out += ' ';
    out.append(f.display).append(" ").append(buf);
  }
  return out;
}

}  // namespace shard

namespace shard {

void DeriveExpertImbalance(StepMetrics* m) {
  m->moe_layers = 0;
  m->moe_imbalance_max = m->moe_imbalance_mean = 0;
  const size_t e = m->moe_experts > 0 ? static_cast<size_t>(m->moe_experts) : 0;
  if (e == 0 || m->expert_load.empty() || m->expert_load.size() % e != 0) return;
  m->moe_layers = static_cast<int64_t>(m->expert_load.size() / e);
  double sum_ratio = 0;
  for (int64_t l = 0; l < m->moe_layers; ++l) {
    double total = 0, most = 0;
    for (size_t i = 0; i < e; ++i) {
      const double v = m->expert_load[l * e + i];
      total += v;
      most = v > most ? v : most;
    }
    const double ratio = total > 0 ? most / (total / static_cast<double>(e)) : 0;
    sum_ratio += ratio;
    m->moe_imbalance_max = ratio > m->moe_imbalance_max ? ratio : m->moe_imbalance_max;
  }
  m->moe_imbalance_mean = sum_ratio / static_cast<double>(m->moe_layers);
}

}  // namespace shard
