#include "shard/train/preference_objective.h"

#include <string>

#include "shard/train/cp_group.h"

namespace shard {
namespace {

// One span per row: each row holds one reply.
std::vector<RowSpan> RowSpans(const DeviceBatch& b) {
  std::vector<RowSpan> spans;
  for (int64_t r = 0; r < b.batch; ++r) spans.push_back({r * b.seq, (r + 1) * b.seq});
  return spans;
}

}  // namespace

void PreferenceObjective::BeginStep(int64_t global_pairs, double loss_scale) {
  global_pairs_ = global_pairs;
  loss_scale_ = loss_scale;
  sums_ = PreferenceSums{};
}

StatusOr<double> PreferenceObjective::MicroBatch(LlamaModel& model, UnitAccess& access, const DeviceBatch& b,
                                                 const int32_t* host_targets, const std::vector<double>& ref) {
  if (b.batch % 2 != 0)
    return InvalidArgument("preference: a micro-batch of " + std::to_string(b.batch) +
                           " rows does not hold whole pairs (chosen, rejected)");
  if (global_pairs_ <= 0) return FailedPrecondition("preference: MicroBatch before BeginStep");
  const int64_t pairs = b.batch / 2;
  if (config_.needs_reference() && static_cast<int64_t>(ref.size()) != 2 * pairs)
    return InvalidArgument("preference: " + std::to_string(ref.size()) + " reference log-probs for " +
                           std::to_string(pairs) + " pairs (two per pair)");
  std::vector<double> counted(static_cast<size_t>(b.batch), 0.0);
  for (int64_t r = 0; r < b.batch; ++r)
    for (int64_t t = 0; t < b.seq; ++t) counted[r] += host_targets[r * b.seq + t] >= 0;
  if (cp_) RETURN_IF_ERROR(cp_->AllReduceSum(counted.data(), b.batch));  // the whole replies' targets
  std::vector<int64_t> tokens(counted.begin(), counted.end());
  for (int64_t r = 0; r < b.batch; ++r)
    if (tokens[r] == 0)
      return InvalidArgument("preference: reply " + std::to_string(r) + " of the micro-batch has no target token");

  double loss_sum = 0;
  PreferenceSums sums;
  const double per_pair = loss_scale_ / static_cast<double>(global_pairs_);
  SpanLoss loss{RowSpans(b), [&](const std::vector<double>& chunk_nll) -> StatusOr<std::vector<float>> {
                  std::vector<double> nll = chunk_nll;  // this rank's chunks: summed over a CP group
                  if (cp_) RETURN_IF_ERROR(cp_->AllReduceSum(nll.data(), static_cast<int64_t>(nll.size())));
                  std::vector<float> factor(nll.size());
                  for (int64_t k = 0; k < pairs; ++k) {
                    PairLogps p;
                    p.chosen = -nll[2 * k];
                    p.rejected = -nll[2 * k + 1];
                    p.chosen_tokens = tokens[2 * k];
                    p.rejected_tokens = tokens[2 * k + 1];
                    if (config_.needs_reference()) {
                      p.ref_chosen = ref[2 * k];
                      p.ref_rejected = ref[2 * k + 1];
                    }
                    const PairLoss l = PreferencePairLoss(config_, p);
                    loss_sum += l.loss;
                    sums.Add(l);
                    // d(CE sum) = −dS: the factor is −dL/dS, over the step's pairs.
                    factor[2 * k] = static_cast<float>(-l.d_chosen * per_pair);
                    factor[2 * k + 1] = static_cast<float>(-l.d_rejected * per_pair);
                  }
                  return factor;
                }};
  RETURN_IF_ERROR(model.ForwardBackwardSpans(b, access, loss).status());
  if (cp_ && cp_->rank() != 0) return 0.0;  // the group's pairs count once (the trainer sums over the world)
  sums_.Add(sums);
  return loss_sum;
}

StatusOr<std::vector<double>> ReplyLogps(LlamaModel& model, UnitAccess& access, const DeviceBatch& b, CpGroup* cp) {
  ASSIGN_OR_RETURN(std::vector<double> nll, model.ForwardSpanLosses(b, access, RowSpans(b)));
  if (cp) RETURN_IF_ERROR(cp->AllReduceSum(nll.data(), static_cast<int64_t>(nll.size())));
  for (double& v : nll) v = -v;
  return nll;
}

}  // namespace shard
