// One training step's figures: the one record the trainer reports, the worker
// sends (proto/codec/metrics_codec.h maps it onto the wire's StepMetric), the
// coordinator stores (coordinator/state/state_store.h) and the API serves
// (MetricRow, through the same codec). Plain data; thread-compatible.
// The optional figures (those some steps carry) are declared once more, with
// their names, units and charts, in step_metric_fields.cc: every sink reads
// that table.
#pragma once

#include <cstdint>
#include <vector>

namespace shard {

struct StepMetrics {
  int64_t step = 0;         // 1-based: training steps done, skipped ones included
  int attempt = 0;          // the attempt that trained it (set by the coordinator; 0 in the trainer)
  double loss = 0;          // mean cross-entropy per target token of this step's global batch
  double lr = 0;
  double grad_norm = 0;     // before clipping, with the loss scale divided out
  double seconds = 0;       // wall time of the step
  // This rank's compute in the step: `seconds` minus the time its training
  // thread waited on collectives (shard/comm/comm_wait_clock.h). Every rank
  // reports its own (straggler detection); not stored with the metrics.
  double compute_seconds = 0;
  int64_t tokens = 0;       // target tokens in the global batch
  // The loss scaler found an inf/NaN in this step's gradients or loss on some
  // rank: no rank applied an update (loss and grad_norm may then be inf/NaN).
  bool skipped = false;
  // The scale this step's gradients were computed with (1 = no scaler; a
  // stored row from a worker too old to report it reads 0).
  double loss_scale = 1.0;
  int64_t positions = 0;    // non-padding positions in the global batch (for tokens/s, MFU)
  int64_t samples = 0;      // samples (or windows) the global batch consumed
  // Held-out evaluation after this step (job file eval:), computed by all
  // ranks together; eval_samples 0 = no evaluation at this step.
  int64_t eval_samples = 0;
  double eval_loss = 0;           // mean cross-entropy per target token of eval.data
  double eval_exact_match = -1;   // greedy exact-match rate of the last reply; -1 = not computed
  // A preference: step (docs/preference.md): loss is the mean pair loss, and
  // these are TRL's metrics (rewards/chosen, ...), means over the step's
  // pairs; pairs 0 = not a preference step. On the wire, in the store and in
  // shardctl metrics, the dashboard and the run report only when pairs > 0.
  int64_t pairs = 0;
  double rewards_chosen = 0, rewards_rejected = 0, rewards_accuracies = 0, rewards_margins = 0;
  double logps_chosen = 0, logps_rejected = 0;
  double nll = 0;  // orpo: the chosen replies' mean token NLL
  // eval: on a preference: job's held-out pairs (eval_samples counts the
  // pairs, eval_loss is their mean pair loss): TRL's metrics on them, means
  // over the pairs; eval_pairs 0 = none at this step. On the wire, in the
  // store and in shardctl metrics, the dashboard and the run report only when
  // eval_pairs > 0.
  int64_t eval_pairs = 0;
  double eval_rewards_chosen = 0, eval_rewards_rejected = 0, eval_rewards_accuracies = 0, eval_rewards_margins = 0;
  double eval_logps_chosen = 0, eval_logps_rejected = 0;
  double eval_nll = 0;  // orpo
  // A sparse (MoE) model (docs/moe.md): moe_layers sparse layers (0 = dense).
  // expert_load holds, per sparse layer, each expert's share of the layer's
  // routed token slots (tokens x k), summed over ranks: layer-major,
  // moe_experts per layer; each layer's shares sum to 1.
  int64_t moe_layers = 0;
  int moe_experts = 0;
  std::vector<double> expert_load;
  double moe_aux_loss = 0;        // the load-balancing loss of the step (mean over its micro-batches)
  double moe_imbalance_max = 0;   // max over layers of (busiest expert's share / mean share); 1 = even
  double moe_imbalance_mean = 0;  // that ratio's mean over the layers
};

// Fills moe_layers, moe_imbalance_max and moe_imbalance_mean from
// expert_load and moe_experts (0 when there is no load).
void DeriveExpertImbalance(StepMetrics* m);

}  // namespace shard
