// How `shardctl metrics JOB` prints a job's per-step metrics: an aligned table
// for people, JSON lines for scripts. Pure functions of the rows.
#pragma once

#include <string>
#include <vector>

#include "shardd/v1/coordinator.pb.h"

namespace shardctl {

// STEP LOSS LR GRAD_NORM TOKENS/S; for a preference: job (rows with pairs)
// TRL's rewards/chosen rewards/rejected rewards/accuracies rewards/margins
// logps/chosen logps/rejected (and nll for ORPO); EVAL_LOSS and EXACT_MATCH
// for evaluated steps; TRL's eval/rewards/chosen ... eval/logps/rejected (and
// eval/nll for ORPO) when some step evaluated held-out pairs; then SCALE and SKIPPED when any row was skipped or used
// a loss scale other than 0 (not reported) and 1 (no scaler).
std::string MetricsTable(const std::vector<shardd::v1::MetricRow>& rows);

// One JSON object per row and line (step, attempt, loss, lr, grad_norm, tokens,
// seconds, tokens_per_s, skipped, loss_scale, eval_samples, eval_loss,
// eval_exact_match; for a preference: job also pairs and TRL's keys
// "rewards/chosen" ... "logps/rejected", "nll"; when some step evaluated
// held-out pairs also eval_pairs and "eval/rewards/chosen" ... "eval/nll",
// null on the other steps); NaN and infinities are null.
std::string MetricsJsonLines(const std::vector<shardd::v1::MetricRow>& rows);

}  // namespace shardctl
