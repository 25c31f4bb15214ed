#include "shard/train/moe_step_figures.h"

namespace shard {

void MoeFiguresFromSums(const LlamaConfig& config, const std::vector<double>& sums, StepMetrics* m) {
  const int E = config.moe.num_experts;
  m->moe_experts = E;
  m->moe_aux_loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  m->expert_load.clear();
  for (int l = 0; l < config.num_layers; ++l) {
    if (!config.sparse_layer(l)) continue;
    const double* row = sums.data() + 2 + static_cast<size_t>(l) * E;
    double total = 0;
    for (int e = 0; e < E; ++e) total += row[e];
    for (int e = 0; e < E; ++e) m->expert_load.push_back(total > 0 ? row[e] / total : 0);
  }
  DeriveExpertImbalance(m);
}

Status PutMoeStepFigures(const LlamaModel& model, FsdpRuntime& runtime, StepMetrics* m) {
  const LlamaConfig& config = model.config();
  if (!config.is_moe()) return OkStatus();
  const MoeMlp::StepStats s = model.moe_step_stats();
  std::vector<double> sums(2 + static_cast<size_t>(config.num_layers) * config.moe.num_experts, 0.0);
  sums[0] = s.aux_sum;
  sums[1] = static_cast<double>(s.micro_batches);
  for (size_t i = 0; i < s.load.size() && 2 + i < sums.size(); ++i) sums[2 + i] = s.load[i];
  RETURN_IF_ERROR(runtime.AllReduceSum(sums.data(), static_cast<int64_t>(sums.size())));
  MoeFiguresFromSums(config, sums, m);
  return OkStatus();
}

}  // namespace shard
