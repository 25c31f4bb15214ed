// One optimizer step of the training loop (Trainer::Step): plan the global
// batch, forward and backward over this rank's micro-batches, reduce the
// gradients and agree on the loss, the stop vote and overflow, update what is
// trained (Trainable), checkpoint when due, and report the step's metrics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "shard/comm/comm_wait_clock.h"
#include "shard/common/fault.h"
#include "shard/common/logging.h"
#include "shard/data/sampler.h"
#include "shard/spec/optim_config.h"
#include "shard/train/moe_step_figures.h"
#include "shard/train/trainer.h"

namespace shard {

StatusOr<StepMetrics> Trainer::Step() {
  auto t0 = std::chrono::steady_clock::now();
  // This thread's time blocked on peers (comm_wait_clock.h): the step minus
  // it is the rank's compute, what straggler detection compares.
  const double waited0 = ThisThreadCommWaitSeconds();
  auto compute_so_far = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() -
           (ThisThreadCommWaitSeconds() - waited0);
  };
  const auto& tc = job_.train;
  // Every rank plans the same global batch; the loss is normalised by its
  // target count whatever the accumulation or world size.
  ASSIGN_OR_RETURN(GlobalBatch gb, data_->Plan(samples_seen_));
  if (gb.target_tokens <= 0)
    return Internal("step " + std::to_string(step_ + 1) + ": the global batch at sample " +
                    std::to_string(samples_seen_) + " holds no target token");
  // The loss scale multiplies the per-token normaliser (exactly, for a power
  // of two) and is divided back out of the norm and in AdamW below.
  const double loss_scale = scaler_->scale();
  const float grad_scale = static_cast<float>(loss_scale) * (1.0f / static_cast<float>(gb.target_tokens));
  objective_->BeginStep(tc.global_batch, loss_scale);
  if (moe_aux_coef_ > 0 || moe_z_coef_ > 0) {
    // The aux (and z) loss is a mean per micro-batch, averaged over the step's micro-batches on every rank
    // (gradients are summed over ranks, as the token-normalised loss's are).
    int64_t micro_batches = 0;
    const int data_world = DataWorld(dist_.world, cp_size());  // a CP group's members share its micro-batches
    for (int r = 0; r < data_world; ++r) {
      const BatchSlice s = RankSlice(tc.global_batch, r, data_world);
      micro_batches += (s.end - s.begin + tc.micro_batch - 1) / tc.micro_batch;
    }
    const double per = loss_scale / static_cast<double>(std::max<int64_t>(1, micro_batches));
    moe_aux_scale_ = static_cast<float>(moe_aux_coef_ * per);
    moe_z_scale_ = static_cast<float>(moe_z_coef_ * per);
  }
  model_->ResetMoeStepStats();  // a sparse model's routing figures (moe_step_figures.h)
  ASSIGN_OR_RETURN(double local_loss, ForwardBackward(grad_scale));
  MaybeSlowRank(dist_.rank, compute_so_far());
  ASSIGN_OR_RETURN(StepSums sums, ReduceStep(local_loss, loss_scale));
  // Torch's GradScaler: an overflow skips the update on every rank (they all
  // saw the same sums) and backs the scale off. The batch is consumed and the
  // schedule moves on (step_, samples_seen_); AdamW's count does not.
  const bool apply = scaler_->Update(sums.nonfinite);
  const double lr = LearningRate(tc.optim, step_, tc.steps);
  if (apply) {
    RETURN_IF_ERROR(ApplyUpdate(sums.norm, loss_scale, lr));
  } else if (dist_.rank == 0) {
    LOG_WARN("step {}: inf/NaN in the gradients or loss (loss sum {}, grad norm {}) at loss scale {}; the update is "
             "skipped on every rank, the scale is now {}",
             step_ + 1, sums.loss_sum, sums.norm, loss_scale, scaler_->scale());
  }
  backend_->Synchronize();
  ++step_;
  samples_seen_ += gb.consumed;
  tokens_seen_ += gb.tokens;
  if (CheckpointDue(step_) || (stop_agreed_ && step_ < tc.steps)) {
    RETURN_IF_ERROR(trainable_->Save(RunState(), CheckpointTier::kDisk));
  } else if (MemoryCheckpointDue(step_) && step_ < tc.steps) {
    RETURN_IF_ERROR(trainable_->Save(RunState(), CheckpointTier::kMemory));
  }
  StepMetrics m;
  m.step = step_;
  m.loss = sums.loss_sum / static_cast<double>(gb.target_tokens);
  m.lr = lr;
  m.grad_norm = sums.norm;
  m.skipped = !apply;
  m.loss_scale = loss_scale;
  m.tokens = gb.target_tokens;
  m.positions = gb.tokens;
  m.samples = gb.consumed;
  RETURN_IF_ERROR(objective_->FinishStep(&m));
  RETURN_IF_ERROR(PutMoeStepFigures(*model_, *runtime_, &m));
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.compute_seconds = std::max(0.0, m.seconds - (ThisThreadCommWaitSeconds() - waited0));
  return m;
}

StatusOr<double> Trainer::ForwardBackward(float grad_scale) {
  const auto& tc = job_.train;
  trainable_->ZeroGrads();
  double loss_sum = 0;
  // A CP group reads its rows as one data rank; each member keeps its chunks (LoadRows).
  const BatchSlice mine =
      RankSlice(tc.global_batch, DataRank(dist_.rank, cp_size()), DataWorld(dist_.world, cp_size()));
  for (int64_t mb = mine.begin; mb < mine.end; mb += tc.micro_batch) {
    // Never past mine.end (the next rank's rows): a short last micro-batch.
    const int64_t n = std::min(tc.micro_batch, mine.end - mb);
    LoadRows(mb, n);
    DeviceBatch b;
    b.batch = n * data_->rows_per_item();  // a preference pair is two rows
    b.seq = job_.data.seq_len / cp_size();
    b.tokens = d_tokens_.as_int();
    b.targets = d_targets_.as_int();
    b.positions = d_pos_.as_int();
    b.segment_ids = data_->segmented() ? d_seg_.as_int() : nullptr;
    if (moe_aux_coef_ > 0 || moe_z_coef_ > 0) {
      model_->SetMoeAuxGradScale(objective_->moe_aux_loss() ? moe_aux_scale_ : 0.0f);
      model_->SetMoeZLossGradScale(objective_->moe_aux_loss() ? moe_z_scale_ : 0.0f);
      b.real_rows = RealRows();
    }
    runtime_->BeginMicroBatch();
    // A seed per step, rank and micro-batch (LoRA's adapter dropout masks).
    trainable_->BeginMicroBatch(tc.seed ^ (static_cast<uint64_t>(step_) << 24) ^
                                (static_cast<uint64_t>(dist_.rank) << 12) ^ static_cast<uint64_t>(mb));
    ASSIGN_OR_RETURN(double l, objective_->MicroStep(b, mb, n, h_targets_.data(), grad_scale));
    RETURN_IF_ERROR(runtime_->FinishMicroBatch());
    loss_sum += l;
  }
  RETURN_IF_ERROR(runtime_->FinishGradients());
  return loss_sum;
}

void Trainer::MarkRealRows(int64_t rows) {
  h_real_.clear();
  if (!data_->segmented()) return;  // token windows: no padding
  const int64_t T = job_.data.seq_len;
  std::vector<int32_t> real(static_cast<size_t>(rows * T), 1);
  // Every sample has a target (packing skips those without), so a segment without one is padding.
  for (int64_t s0 = 0; s0 < rows * T; s0 += T) {
    std::unordered_set<int32_t> with_target;
    for (int64_t i = s0; i < s0 + T; ++i)
      if (h_targets_[i] >= 0) with_target.insert(h_seg_[i]);
    for (int64_t i = s0; i < s0 + T; ++i) real[i] = with_target.count(h_seg_[i]) ? 1 : 0;
  }
  if (cp_) cp_->Split(rows, T, {real.data()});  // this rank's chunks, as its tokens
  h_real_.assign(real.begin(), real.begin() + rows * T / cp_size());
}

StatusOr<Trainer::StepSums> Trainer::ReduceStep(double loss_sum, double loss_scale) {
  if (dist_.gradient_hook) dist_.gradient_hook(step_ + 1, *backend_, *runtime_);
  // The norm is summed over the shard group only; replicas (no_shard,
  // hybrid_shard) agree on it because their gradients are identical — unless
  // one of them went non-finite on its own. So each rank's "my norm is not
  // finite" flag travels with the loss sum and the stop vote in one world-wide
  // all-reduce, and every rank decides from the same three sums.
  ASSIGN_OR_RETURN(double sq, trainable_->ReduceGradsNormSquared());
  double reduced[3] = {loss_sum, dist_.stop_requested && dist_.stop_requested() ? 1.0 : 0.0,
                       std::isfinite(sq) ? 0.0 : 1.0};
  RETURN_IF_ERROR(runtime_->AllReduceSum(reduced, 3));
  StepSums s;
  s.loss_sum = reduced[0];
  stop_agreed_ = reduced[1] > 0;
  s.nonfinite = reduced[2] > 0 || !std::isfinite(s.loss_sum);
  s.norm = std::sqrt(sq) / loss_scale;
  // Another replica's norm was not finite: report that here too, so every
  // rank's metrics and errors say the same.
  if (s.nonfinite && std::isfinite(s.norm) && reduced[2] > 0) s.norm = std::numeric_limits<double>::quiet_NaN();
  if (s.nonfinite && (!scaler_->enabled() || scaler_->at_floor()))
    return Internal("step " + std::to_string(step_ + 1) + ": loss or gradient norm is not finite (loss sum " +
                    std::to_string(s.loss_sum) + ", grad norm " + std::to_string(s.norm) +
                    (scaler_->enabled() ? ", even at the dynamic loss scale's floor " + std::to_string(loss_scale)
                                        : std::string()) +
                    "); lower train.lr or enable train.grad_clip");
  return s;
}

Status Trainer::ApplyUpdate(double norm, double loss_scale, double lr) {
  const OptimConfig& oc = job_.train.optim;
  float clip = 1.0f;
  if (oc.grad_clip > 0 && norm > oc.grad_clip) clip = static_cast<float>(oc.grad_clip / (norm + 1e-6));
  // AdamW multiplies the gradients by this first: clipping and the unscale.
  const float unscale = static_cast<float>(static_cast<double>(clip) / loss_scale);
  RETURN_IF_ERROR(trainable_->Step(oc, static_cast<float>(lr), optimizer_steps_ + 1, unscale));
  ++optimizer_steps_;
  return OkStatus();
}

}  // namespace shard
