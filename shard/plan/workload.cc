#include "shard/plan/workload.h"

#include <algorithm>

namespace shard::plan {

const char* MethodName(Method m) {
  switch (m) {
    case Method::kFull: return "full";
    case Method::kLora: return "lora";
    case Method::kQlora: return "qlora";
  }
  return "?";
}

int64_t Workload::micro_batches_per_step() const {
  const int64_t per = std::max<int64_t>(1, micro_batch) * data_ranks();
  return std::max<int64_t>(1, (global_batch + per - 1) / per);
}

std::string Workload::Describe() const {
  std::string s = model_name + " " + MethodName(method);
  if (method != Method::kFull)
    s += " r" + std::to_string(lora_rank) + " (frozen " + (method == Method::kQlora ? "NF4 + " : "") +
         DTypeName(base_dtype()) + " base)";
  s += std::string(", ") + (cpu_engine ? "fp32 (CPU engine)" : DTypeName(compute));
  if (!fp32_master && !cpu_engine) s += " (pure)";
  s += std::string(", ") + StrategyName(strategy) + " x" + std::to_string(world);
  if (strategy == ShardStrategy::kHybridShard && shard_group_size > 0) s += " (groups of " + std::to_string(shard_group_size) + ")";
  if (activation_checkpointing) s += ", activation checkpointing";
  if (offload.optimizer) s += ", optimizer offload";
  if (offload.params) s += ", parameter offload";
  s += ", micro-batch " + std::to_string(micro_batch) + " x " + std::to_string(seq_len) + " tokens";
  if (context_parallel > 1)
    s += " (context parallel " + std::to_string(context_parallel) + ": " + std::to_string(local_seq_len()) +
         " per rank)";
  if (rows_per_item == 2) s += " (" + std::to_string(micro_batch / 2) + " preference pairs)";
  if (micro_batches_per_step() > 1) s += ", " + std::to_string(micro_batches_per_step()) + " micro-batches per step";
  return s;
}

}  // namespace shard::plan
