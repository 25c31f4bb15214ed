// The trainer's side of a preference: job (docs/preference.md): the
// reference pass, computed once per data and model and stored beside the
// prepared pairs, and the step's micro-batches and metrics through
// PreferenceObjective.
//
// The reference file, <prepared prefix>.ref-<key>.f64, holds two doubles per
// pair (the chosen and rejected replies' summed log-probs under the starting
// weights); key hashes the data fingerprint (the pairs as prepared) and the
// model's (ReferenceKey: a preset and its init seed, or the HF weights' values,
// never their path; the precision). Every later attempt with the same key
// reads it back, so a resumed run never recomputes it — and could not: its
// weights are no longer the starting ones. Each checkpoint records the key
// (Manifest::reference) for a resumed full fine-tune, which never loads (so
// cannot hash) its starting weights.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "shard/ckpt/manifest.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/logging.h"
#include "shard/data/pair_batcher.h"
#include "shard/data/sampler.h"
#include "shard/train/trainer.h"

namespace shard {
namespace {

constexpr char kRefMagic[8] = {'S', 'H', 'D', 'R', 'E', 'F', '0', '1'};

std::string EncodeReference(const std::vector<double>& v) {
  std::string out(kRefMagic, sizeof(kRefMagic));
  const uint64_t n = v.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof(n));
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  const uint64_t h = Xxh64(v.data(), v.size() * sizeof(double));
  out.append(reinterpret_cast<const char*>(&h), sizeof(h));
  return out;
}

// DATA_LOSS when the file is not a whole reference of `count` values.
StatusOr<std::vector<double>> DecodeReference(const std::string& bytes, uint64_t count, const std::string& path) {
  const size_t want = sizeof(kRefMagic) + 8 + count * sizeof(double) + 8;
  if (bytes.size() != want || std::memcmp(bytes.data(), kRefMagic, sizeof(kRefMagic)) != 0)
    return DataLoss(path + ": not a reference log-prob file of " + std::to_string(count) + " values");
  uint64_t n = 0, h = 0;
  std::memcpy(&n, bytes.data() + sizeof(kRefMagic), 8);
  std::vector<double> v(count);
  std::memcpy(v.data(), bytes.data() + sizeof(kRefMagic) + 8, count * sizeof(double));
  std::memcpy(&h, bytes.data() + want - 8, 8);
  if (n != count || h != Xxh64(v.data(), v.size() * sizeof(double)))
    return DataLoss(path + ": checksum or count mismatch");
  return v;
}

}  // namespace

// The pairs as prepared and the starting model: a preset by its name and init
// seed; HF weights by their values and config, not their path (a copy
// elsewhere is the same model, new weights at the same path are not); under
// peft: the base without adapters. And the precision the pass computes in.
std::string Trainer::ReferenceKey(const std::string& data_fingerprint) const {
  const std::string model = job_.model.from_hf.empty()
                                ? "preset " + job_.model.preset + "|seed " + std::to_string(job_.train.seed)
                                : "hf weights " + HashToHex(base_weights_hash_) + "|" + model_->config().ToHfConfigJson();
  const std::string text = data_fingerprint + "\n" + model + "|" + PrecisionName(precision_);
  return HashToHex(Xxh64(text.data(), text.size()));
}

Status Trainer::PrepareReference() {
  preference_ = std::make_unique<PreferenceObjective>(job_.preference);
  if (!job_.preference.needs_reference()) return OkStatus();
  // The memory simulator (no data) runs the preference step on synthetic
  // pairs (2·micro_batch rows) against zero reference values. The pass itself
  // is forward only on the same rows: it peaks below the step.
  if (!backend_->holds_data()) {
    reference_logps_.assign(static_cast<size_t>(2 * job_.train.global_batch), 0.0);
    return OkStatus();
  }
  const std::string prefix = SftPreparedPrefix(job_);
  PreparedDataset::OpenOptions quick;  // opened and verified by OpenBatchSource already
  quick.verify_contents = false;
  quick.verify_checksums = false;
  ASSIGN_OR_RETURN(PreparedDataset ds, PreparedDataset::Open(prefix, quick));
  const int64_t N = ds.header().num_pairs();
  // A resumed full fine-tune never loaded its starting weights (Init): its
  // key is the one its first attempt recorded in the checkpoint.
  const bool have_start = resume_.step_dir.empty();
  std::string key;
  if (!have_start) {
    const std::string committed = resume_.step_dir + "/" + kCommittedFile;
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(committed));
    ASSIGN_OR_RETURN(Manifest m, Manifest::FromJson(text, committed));
    key = m.reference;
  }
  if (key.empty() && !have_start && !job_.model.from_hf.empty())
    return FailedPrecondition(resume_.step_dir +
                              " records no reference log-probs key and a resumed model.from_hf full fine-tune no "
                              "longer holds its starting weights; start the run afresh (checkpoint.resume: none)");
  if (key.empty()) key = ReferenceKey(data_->Fingerprint());
  reference_key_ = key;
  const std::string path = prefix + ".ref-" + key + ".f64";

  // Every rank must agree to read or to compute (the pass is collective).
  std::vector<double> stored;
  if (auto bytes = ReadFileToString(path); bytes.ok()) {
    auto v = DecodeReference(*bytes, static_cast<uint64_t>(2 * N), path);
    if (v.ok()) {
      stored = std::move(*v);
    } else {
      LOG_WARN("recomputing the reference log-probs: {}", v.status().message());
    }
  }
  double have = stored.empty() ? 0.0 : 1.0;
  RETURN_IF_ERROR(runtime_->AllReduceSum(&have, 1));
  if (have == dist_.world) {
    reference_logps_ = std::move(stored);
    if (dist_.rank == 0) LOG_INFO("reference log-probs of {} pairs read from {}", N, path);
    return OkStatus();
  }

  if (!have_start) {
    if (!job_.model.from_hf.empty())
      return FailedPrecondition("reference log-probs " + path +
                                " are missing or damaged and a resumed model.from_hf full fine-tune no longer holds "
                                "its starting weights; restore the file or start afresh (checkpoint.resume: none)");
    // A preset's starting weights are its deterministic init: scored again
    // (Resume then overwrites every shard from the checkpoint).
    if (dist_.rank == 0) LOG_WARN("reference log-probs {} are missing: scoring the initial weights again", path);
    RETURN_IF_ERROR(LoadInitialWeights(nullptr));
  }

  // The pass: each rank its contiguous share of the pairs, micro_batch pairs
  // at a time, the same number of forwards on every rank (FSDP gathers are
  // collective; a rank past its share computes and discards).
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t micro = job_.train.micro_batch, T = job_.data.seq_len, world = dist_.world;
  const int64_t share = (N + world - 1) / world, iters = (share + micro - 1) / micro;
  const int64_t begin = std::min(N, dist_.rank * share), end = std::min(N, begin + share);
  Sampler order(N, /*shuffle=*/false, 0);
  PairBatcherOptions po;
  po.global_batch = micro;
  po.seq_len = T;
  ASSIGN_OR_RETURN(PairBatcher batcher, PairBatcher::Create(&ds, &order, po));
  const int64_t rows = 2 * micro * T;
  std::vector<int32_t> tok(rows), tgt(rows), pos(rows), seg(rows);
  ASSIGN_OR_RETURN(DeviceBuffer dt, DeviceBuffer::Create(backend_.get(), rows));
  ASSIGN_OR_RETURN(DeviceBuffer dg, DeviceBuffer::Create(backend_.get(), rows));
  ASSIGN_OR_RETURN(DeviceBuffer dp, DeviceBuffer::Create(backend_.get(), rows));
  std::vector<double> ref(static_cast<size_t>(2 * N), 0.0);
  if (lora()) RETURN_IF_ERROR(model_->SetLora(nullptr));  // the base without the adapters, as TRL/PEFT
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t first = begin + it * micro;
    const PairPlan plan = batcher.PlanGlobalBatch(first);
    batcher.FillPairs(plan, 0, micro, tok.data(), tgt.data(), pos.data(), seg.data());
    const size_t bytes = static_cast<size_t>(rows) * sizeof(int32_t);
    backend_->CopyToDevice(dt.data(), tok.data(), bytes);
    backend_->CopyToDevice(dg.data(), tgt.data(), bytes);
    backend_->CopyToDevice(dp.data(), pos.data(), bytes);
    DeviceBatch b{2 * micro, T, dt.as_int(), dg.as_int(), dp.as_int(), nullptr};
    runtime_->BeginMicroBatch();  // a pass outside the recorded training order
    auto logps = ReplyLogps(*model_, *runtime_, b);
    RETURN_IF_ERROR(runtime_->FinishMicroBatch());
    if (!logps.ok()) return logps.status().WithContext("reference pass");
    for (int64_t k = 0; k < micro && first + k < end; ++k) {
      ref[2 * (first + k)] = (*logps)[2 * k];
      ref[2 * (first + k) + 1] = (*logps)[2 * k + 1];
    }
  }
  if (lora()) RETURN_IF_ERROR(model_->SetLora(lora()->binding()));
  RETURN_IF_ERROR(runtime_->AllReduceSum(ref.data(), static_cast<int64_t>(ref.size())));
  if (dist_.rank == 0) {
    RETURN_IF_ERROR(WriteFileAtomic(path, EncodeReference(ref)));
    LOG_INFO("reference log-probs of {} pairs computed in {:.2f} s and stored in {}", N,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), path);
  }
  reference_logps_ = std::move(ref);
  return OkStatus();
}

StatusOr<double> Trainer::PreferenceMicroBatch(const DeviceBatch& b, int64_t first_pair, int64_t pairs) {
  std::vector<double> ref;
  if (!reference_logps_.empty()) {
    for (int64_t id : data_->ItemIds(first_pair, pairs)) {
      ref.push_back(reference_logps_[2 * id]);
      ref.push_back(reference_logps_[2 * id + 1]);
    }
  }
  return preference_->MicroBatch(*model_, *runtime_, b, h_targets_.data(), ref);
}

Status Trainer::FinishPreferenceStep(StepMetrics* m) {
  double s[PreferenceSums::kFields];
  preference_->sums().ToArray(s);
  RETURN_IF_ERROR(runtime_->AllReduceSum(s, PreferenceSums::kFields));
  const PreferenceMetrics pm = MeanMetrics(PreferenceSums::FromArray(s));
  m->pairs = static_cast<int64_t>(s[0]);
  m->loss = pm.loss;
  m->rewards_chosen = pm.rewards_chosen;
  m->rewards_rejected = pm.rewards_rejected;
  m->rewards_accuracies = pm.rewards_accuracies;
  m->rewards_margins = pm.rewards_margins;
  m->logps_chosen = pm.logps_chosen;
  m->logps_rejected = pm.logps_rejected;
  m->nll = pm.nll;
  return OkStatus();
}

}  // namespace shard
