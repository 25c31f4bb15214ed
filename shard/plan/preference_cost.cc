#include "shard/plan/preference_cost.h"

#include <algorithm>

namespace shard::plan {

int64_t ReferenceFileBytes(int64_t pairs) { return 8 + 8 + 16 * std::max<int64_t>(0, pairs) + 8; }

ReferenceCost PriceReferencePass(const Workload& w, const StepTime& t, int64_t pairs) {
  ReferenceCost r;
  r.pairs = std::max<int64_t>(0, pairs);
  const LlamaConfig& c = w.model;
  const double N = static_cast<double>(c.NumMatmulParams());
  // Per token: attention 4 (forward) of StepTime's 12 (forward + backward).
  const double attn_fwd = 4.0 * c.num_layers * static_cast<double>(c.num_heads) * c.head_dim() * w.seq_len;
  const double share = t.hardware_flops_per_token > 0 ? (2.0 * N + attn_fwd) / t.hardware_flops_per_token : 0;
  // The step's collectives per micro-batch: gathers (two under full_shard and
  // hybrid_shard, one under shard_grad_op and no_shard keeps nothing to
  // gather) and, training every weight, a reduce-scatter of the same size.
  const double gathers = w.strategy == ShardStrategy::kShardGradOp ? 1 : 2;
  const double gather_s = t.comm_s / (gathers + (w.method == Method::kFull ? 1 : 0));
  r.forward_s = std::max(t.compute_s * share, gather_s);
  const int64_t world = std::max(1, w.world);
  const int64_t micro_pairs = std::max<int64_t>(1, w.micro_batch / std::max(1, w.rows_per_item));
  const int64_t mine = (r.pairs + world - 1) / world;
  r.forwards = (mine + micro_pairs - 1) / micro_pairs;
  r.pass_s = static_cast<double>(r.forwards) * r.forward_s;
  r.file_bytes = ReferenceFileBytes(r.pairs);
  return r;
}

}  // namespace shard::plan
