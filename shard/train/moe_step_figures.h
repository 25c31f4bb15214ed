// A sparse (MoE) model's figures of one step (StepMetrics' moe_*, declared in
// shard/spec/step_metric_fields.cc): the load-balancing loss, averaged over
// every micro-batch of every rank, and per sparse layer each expert's share of
// the routed slots (tokens x k), summed over ranks.
#pragma once

#include "shard/common/status.h"
#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/llama_model.h"
#include "shard/spec/step_metrics.h"

namespace shard {

// Sums the model's step statistics over the world (one all-reduce; every
// rank calls it) and fills m's moe_* figures. A dense model: nothing.
Status PutMoeStepFigures(const LlamaModel& model, FsdpRuntime& runtime, StepMetrics* m);

// The pure part: from the world's sums (aux_sum, micro_batches, then
// num_layers x num_experts slot counts) to the figures; layers that are not
// sparse (config.sparse_layer) are left out.
void MoeFiguresFromSums(const LlamaConfig& config, const std::vector<double>& sums, StepMetrics* m);

}  // namespace shard
