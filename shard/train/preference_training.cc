// The preference objective (objective.h) of a preference: job
// (docs/preference.md): the reference pass, computed once per data and model
// and stored beside the prepared pairs (the training pairs and eval:'s
// held-out pairs), and the step's micro-batches and metrics through
// PreferenceObjective (the pair loss, preference_objective.h).
//
// The reference file, <prepared prefix>.ref-<key>.f64, holds two doubles per
// pair (the chosen and rejected replies' summed log-probs under the starting
// weights); key hashes the data fingerprint (the pairs as prepared) and the
// model's (ReferenceModelKey: a preset and its init seed, or the HF weights'
// values, never their path; the precision). Every later attempt with the same
// key reads it back, so a resumed run never recomputes it — and could not:
// its weights are no longer the starting ones. Each checkpoint records the
// model's part (Manifest::reference) for a resumed full fine-tune, which
// never loads (so cannot hash) its starting weights.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "shard/ckpt/manifest.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"
#include "shard/spec/step_metric_fields.h"
#include "shard/data/reference_file.h"
#include "shard/train/pair_scoring.h"
#include "shard/train/cp_group.h"
#include "shard/train/pair_source.h"
#include "shard/train/objective.h"
#include "shard/train/preference_objective.h"

namespace shard {
namespace {

// A stored value and the starting weights' own may differ by fp32 noise
// (another world size scores the same pairs in other runs); a forged or stale
// file differs by far more.
constexpr double kReferenceTolerance = 1e-3;

bool SameReference(double stored, double own) {
  return std::abs(stored - own) <= kReferenceTolerance * std::max(1.0, std::abs(own));
}

// The starting model's part of the reference files' keys (16 hex digits): a
// preset by its name and init seed; HF weights by their values and config,
// not their path (a copy elsewhere is the same model, new weights at the same
// path are not); under peft: the base without adapters; and the precision the
// pass computes in. A resumed run reads it from its checkpoint: a resumed full
// fine-tune never loaded its starting weights.
StatusOr<std::string> ReferenceModelKey(const JobConfig& job, const std::string& resume_step_dir,
                                        uint64_t base_weights_hash, const LlamaConfig& config, Precision precision) {
  if (!resume_step_dir.empty()) {
    const std::string committed = resume_step_dir + "/" + kCommittedFile;
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(committed));
    ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, committed));
    if (!m.reference.empty()) return m.reference;
    if (!job.model.from_hf.empty())
      return FailedPrecondition(resume_step_dir + " records no reference model and a resumed model.from_hf full "
                                "fine-tune no longer holds its starting weights; start the run afresh "
                                "(checkpoint.resume: none)");
  }
  const std::string model = job.model.from_hf.empty()
                                ? "preset " + job.model.preset + "|seed " + std::to_string(job.train.seed)
                                : "hf weights " + HashToHex(base_weights_hash) + "|" + config.ToHfConfigJson();
  const std::string text = model + "|" + PrecisionName(precision);
  return HashToHex(Xxh64(text.data(), text.size()));
}

class PreferenceTraining : public Objective {
 public:
  explicit PreferenceTraining(const PreferenceConfig& config) : loss_(config) {}

  Status Prepare(const ObjectiveParts& parts) override;
  void BeginStep(int64_t global_items, double loss_scale) override { loss_.BeginStep(global_items, loss_scale); }
  StatusOr<double> MicroStep(const DeviceBatch& b, int64_t first_item, int64_t items, const int32_t* host_targets,
                             float grad_scale) override;
  Status FinishStep(StepMetrics* m) override;
  Status Evaluate(StepMetrics* m) override;
  // Preference pairs carry no padding mask yet: no aux loss there (docs/moe.md).
  bool moe_aux_loss() const override { return false; }
  std::string reference_model() const override { return reference_model_; }
  int reference_passes() const override { return reference_passes_; }

 private:
  // One prepared set of pairs' reference log-probs: read back from
  // <prefix>.ref-<key>.f64, or computed (ComputeReference) and stored there.
  // what names the set in logs and errors ("data.jsonl", "eval.data").
  StatusOr<std::vector<double>> ReferenceLogps(const PreparedDataset& ds, const std::string& prefix,
                                               const std::string& data_fingerprint, const std::string& what);
  // The reference pass over ds: all ranks together, two values per pair.
  StatusOr<std::vector<double>> ComputeReference(const PreparedDataset& ds);
  // On a fresh start: whether `stored` holds the starting weights' own
  // log-probs of the first pairs (else the file is recomputed).
  StatusOr<bool> StoredReferenceHolds(const PreparedDataset& ds, const std::vector<double>& stored);
  // The scoring ranks: the data ranks, each CP group scoring its pairs' split rows together.
  void SetScoringRanks(PairScoringOptions* o) const {
    const int c = p_.cp ? p_.cp->size() : 1;
    o->rank = DataRank(p_.rank, c);
    o->world = DataWorld(p_.world, c);
    o->cp = p_.cp;
  }
  // Whether this rank counts its scored pairs in sums over the world (one member of each CP group).
  bool CountsScoredPairs() const { return !p_.cp || p_.cp->rank() == 0; }
  // ScorePairs with the starting weights: under peft: the base without the adapters.
  StatusOr<ScoredPairs> ScoreWithBase(const PreparedDataset& ds, const PairScoringOptions& o);

  ObjectiveParts p_;
  PreferenceObjective loss_;
  std::vector<double> reference_logps_;       // two per pair (chosen, rejected); empty for orpo
  std::vector<double> eval_reference_logps_;  // the same for eval.data's pairs
  int reference_passes_ = 0;                  // ComputeReference calls
  std::string reference_model_;               // ReferenceModelKey(), recorded in each checkpoint; "" = none
};

}  // namespace

Status PreferenceTraining::Prepare(const ObjectiveParts& parts) {
  p_ = parts;
  loss_.SetContextParallel(p_.cp);
  if (!p_.job->preference.needs_reference()) return OkStatus();
  // The memory simulator (no data) runs the preference step on synthetic
  // pairs (2·micro_batch rows) against zero reference values. The pass itself
  // is forward only on the same rows: it peaks below the step.
  if (!p_.backend->holds_data()) {
    reference_logps_.assign(static_cast<size_t>(2 * p_.job->train.global_batch), 0.0);
    return OkStatus();
  }
  ASSIGN_OR_RETURN(reference_model_,
                   ReferenceModelKey(*p_.job, p_.resume_step_dir, p_.base_weights_hash, p_.model->config(), p_.precision));
  const std::string prefix = SftPreparedPrefix(*p_.job);
  PreparedDataset::OpenOptions quick;  // opened and verified by OpenBatchSource already
  quick.verify_contents = false;
  quick.verify_checksums = false;
  ASSIGN_OR_RETURN(PreparedDataset ds, PreparedDataset::Open(prefix, quick));
  ASSIGN_OR_RETURN(reference_logps_, ReferenceLogps(ds, prefix, p_.data->Fingerprint(), "data.jsonl"));
  // The held-out pairs (eval:) get theirs in the same pass, beside their own
  // prepared data: eval never holds a second model either.
  if (p_.eval_data) {
    ASSIGN_OR_RETURN(eval_reference_logps_, ReferenceLogps(*p_.eval_data, p_.eval_prefix,
                                                           PairsFingerprint(p_.eval_data->header()), "eval.data"));
  }
  return OkStatus();
}

StatusOr<std::vector<double>> PreferenceTraining::ReferenceLogps(const PreparedDataset& ds, const std::string& prefix,
                                                      const std::string& data_fingerprint, const std::string& what) {
  const int64_t N = ds.header().num_pairs();
  const std::string key_text = data_fingerprint + "\n" + reference_model_;
  const std::string path = prefix + ".ref-" + HashToHex(Xxh64(key_text.data(), key_text.size())) + ".f64";

  // Every rank must agree to read or to compute (the pass is collective).
  std::vector<double> stored;
  if (auto v = ReadReferenceFile(path, static_cast<uint64_t>(2 * N)); v.ok()) {
    stored = std::move(*v);
  } else if (v.status().code() != StatusCode::kNotFound) {
    LOG_WARN("recomputing the reference log-probs: {}", v.status().message());
  }
  double have = stored.empty() ? 0.0 : 1.0;
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(&have, 1));
  // On a fresh start the policy is the reference: the stored values of the
  // first pairs must be the starting weights' own (step 1's rewards are 0).
  if (have == p_.world && p_.resume_step_dir.empty()) {
    ASSIGN_OR_RETURN(bool same, StoredReferenceHolds(ds, stored));
    if (!same) {
      if (p_.rank == 0)
        LOG_WARN("recomputing the reference log-probs: {} does not hold the starting weights' own log-probs "
                 "(its first pairs differ by more than {}; a stale or altered file)",
                 path, kReferenceTolerance);
      have = 0;
    }
  }
  if (have == p_.world) {
    if (p_.rank == 0) LOG_INFO("reference log-probs of {} pairs ({}) read from {}", N, what, path);
    return stored;
  }
  // A resumed full fine-tune holds the checkpoint's weights, never the
  // starting ones (only a peft: job reloads its base): scoring now would
  // store the wrong reference.
  if (!p_.resume_step_dir.empty())
    return FailedPrecondition(what + ": its reference log-probs are not stored at " + path + " and this attempt "
                              "resumes from " + p_.resume_step_dir + ", whose weights are not the starting ones; "
                              "restore the file or train again from the start");
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<double> ref, ComputeReference(ds));
  if (p_.rank == 0) {
    RETURN_IF_ERROR(WriteFileAtomic(path, EncodeReferenceFile(ref)));
    LOG_INFO("reference log-probs of {} pairs ({}) computed in {:.2f} s and stored in {}", N, what,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), path);
  }
  return ref;
}

// Scores the first pairs (one global batch: a forward only, as the pass
// does) with the starting weights and compares them with `stored`. A
// collective; every rank returns the same answer.
StatusOr<bool> PreferenceTraining::StoredReferenceHolds(const PreparedDataset& ds, const std::vector<double>& stored) {
  PairScoringOptions o;
  o.micro = p_.job->train.micro_batch;
  o.seq_len = p_.job->data.seq_len;
  o.max_pairs = std::min<int64_t>(ds.header().num_pairs(), p_.job->train.global_batch);
  SetScoringRanks(&o);
  auto scored = ScoreWithBase(ds, o);
  if (!scored.ok()) return scored.status().WithContext("checking the stored reference");
  double differ = 0;
  for (size_t k = 0; k < scored->pairs.size(); ++k)
    for (int side = 0; side < 2; ++side)
      differ += SameReference(stored[2 * scored->pairs[k] + side], scored->logps[2 * k + side]) ? 0 : 1;
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(&differ, 1));
  return differ == 0;
}

// The pass: the ranks score the pairs together (pair_scoring.h), micro_batch
// pairs per forward, with the starting weights — under peft: the base without
// the adapters, as TRL/PEFT — and add their shares into every pair's values.
StatusOr<std::vector<double>> PreferenceTraining::ComputeReference(const PreparedDataset& ds) {
  PairScoringOptions o;
  o.micro = p_.job->train.micro_batch;
  o.seq_len = p_.job->data.seq_len;
  SetScoringRanks(&o);
  auto scored = ScoreWithBase(ds, o);
  if (!scored.ok()) return scored.status().WithContext("reference pass");
  ++reference_passes_;
  std::vector<double> ref(static_cast<size_t>(2 * ds.header().num_pairs()), 0.0);
  for (size_t k = 0; CountsScoredPairs() && k < scored->pairs.size(); ++k) {
    ref[2 * scored->pairs[k]] = scored->logps[2 * k];
    ref[2 * scored->pairs[k] + 1] = scored->logps[2 * k + 1];
  }
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(ref.data(), static_cast<int64_t>(ref.size())));
  return ref;
}

StatusOr<ScoredPairs> PreferenceTraining::ScoreWithBase(const PreparedDataset& ds, const PairScoringOptions& o) {
  if (p_.lora) RETURN_IF_ERROR(p_.model->SetLora(nullptr));
  auto scored = ScorePairs(*p_.model, *p_.runtime, p_.backend, ds, o);
  if (p_.lora) RETURN_IF_ERROR(p_.model->SetLora(p_.lora->binding()));
  return scored;
}

StatusOr<double> PreferenceTraining::MicroStep(const DeviceBatch& b, int64_t first_item, int64_t items,
                                               const int32_t* host_targets, float) {
  std::vector<double> ref;
  if (!reference_logps_.empty()) {
    for (int64_t id : p_.data->ItemIds(first_item, items)) {
      ref.push_back(reference_logps_[2 * id]);
      ref.push_back(reference_logps_[2 * id + 1]);
    }
  }
  return loss_.MicroBatch(*p_.model, *p_.runtime, b, host_targets, ref);
}

Status PreferenceTraining::FinishStep(StepMetrics* m) {
  double s[PreferenceSums::kFields];
  loss_.sums().ToArray(s);
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(s, PreferenceSums::kFields));
  const PreferenceMetrics pm = MeanMetrics(PreferenceSums::FromArray(s));
  m->pairs = static_cast<int64_t>(s[0]);
  PutPreferenceFigures(pm, /*eval=*/false, m);
  return OkStatus();
}

// The held-out pairs with the current weights (adapters included: a
// forward-only pass applies no dropout), each pair's loss and TRL metrics
// against the reference log-probs stored before the first step (orpo: none).
Status PreferenceTraining::Evaluate(StepMetrics* m) {
  const auto t0 = std::chrono::steady_clock::now();
  PairScoringOptions o;
  o.micro = p_.job->train.micro_batch;
  o.seq_len = p_.job->data.seq_len;
  o.max_pairs = p_.job->eval.max_samples;
  SetScoringRanks(&o);
  auto scored = ScorePairs(*p_.model, *p_.runtime, p_.backend, *p_.eval_data, o);
  if (!scored.ok()) return scored.status().WithContext("eval on held-out pairs at step " + std::to_string(m->step));
  ASSIGN_OR_RETURN(PreferenceSums mine, ScoredPairSums(p_.job->preference, *scored, eval_reference_logps_));
  if (!CountsScoredPairs()) mine = PreferenceSums{};  // the CP group's pairs count once
  double s[PreferenceSums::kFields];
  mine.ToArray(s);
  RETURN_IF_ERROR(p_.runtime->AllReduceSum(s, PreferenceSums::kFields));
  const PreferenceMetrics pm = MeanMetrics(PreferenceSums::FromArray(s));
  m->eval_pairs = m->eval_samples = static_cast<int64_t>(s[0]);
  m->eval_exact_match = -1;
  PutPreferenceFigures(pm, /*eval=*/true, m);
  if (p_.rank == 0)
    LOG_INFO("eval step {}: loss {:.4f} over {} pairs, {} in {:.2f} s", m->step, m->eval_loss, m->eval_pairs,
             FormatFigures(*m, MetricSplit::kEval),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return OkStatus();
}

std::unique_ptr<Objective> MakePreferenceObjective(const JobConfig& job) {
  return std::make_unique<PreferenceTraining>(job.preference);
}

}  // namespace shard

