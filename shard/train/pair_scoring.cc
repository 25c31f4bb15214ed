#include "shard/train/pair_scoring.h"

#include <algorithm>
#include <string>

#include "shard/data/packing.h"
#include "shard/data/pair_batcher.h"
#include "shard/train/cp_group.h"
#include "shard/train/preference_objective.h"

namespace shard {
namespace {

// Host staging and device copies of one forward's rows (2·micro of seq_len).
struct PairRows {
  std::vector<int32_t> tok, tgt, pos, seg;
  DeviceBuffer d_tok, d_tgt, d_pos;

  static StatusOr<PairRows> Create(Backend* backend, int64_t n) {
    PairRows r;
    for (auto* h : {&r.tok, &r.tgt, &r.pos, &r.seg}) h->resize(n);
    for (auto* d : {&r.d_tok, &r.d_tgt, &r.d_pos}) {
      ASSIGN_OR_RETURN(*d, DeviceBuffer::Create(backend, n));
    }
    return r;
  }
  DeviceBatch Upload(Backend* backend, int64_t rows, int64_t seq) {
    const size_t bytes = static_cast<size_t>(rows * seq) * sizeof(int32_t);
    backend->CopyToDevice(d_tok.data(), tok.data(), bytes);
    backend->CopyToDevice(d_tgt.data(), tgt.data(), bytes);
    backend->CopyToDevice(d_pos.data(), pos.data(), bytes);
    return DeviceBatch{rows, seq, d_tok.as_int(), d_tgt.as_int(), d_pos.as_int(), nullptr};
  }
};

// One forward of `ids` (at most micro pairs; none: one pair of padding, so
// this rank still takes part in the forward's gathers). Appends to *out.
Status ScoreRun(LlamaModel& model, FsdpRuntime& runtime, Backend* backend, const PreparedDataset& data,
                const PairBatcher& batcher, const std::vector<int64_t>& ids, PairRows& rows, CpGroup* cp,
                ScoredPairs* out) {
  PairPlan plan;
  plan.pairs = ids;
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(ids.size()));
  batcher.FillPairs(plan, 0, n, rows.tok.data(), rows.tgt.data(), rows.pos.data(), rows.seg.data());
  const int64_t seq = batcher.options().seq_len;
  if (cp) cp->Split(2 * n, seq, {rows.tok.data(), rows.tgt.data(), rows.pos.data()});  // this rank's chunks
  const DeviceBatch b = rows.Upload(backend, 2 * n, cp ? seq / cp->size() : seq);
  runtime.BeginMicroBatch();  // a pass outside the recorded training order
  auto logps = ReplyLogps(model, runtime, b, cp);
  RETURN_IF_ERROR(runtime.FinishMicroBatch());  // frees what the pass left gathered
  if (!logps.ok()) return logps.status();
  for (size_t k = 0; k < ids.size(); ++k) {
    out->pairs.push_back(ids[k]);
    for (int side = 0; side < 2; ++side) {
      const int64_t s = 2 * ids[k] + side;
      out->logps.push_back((*logps)[2 * k + side]);
      out->tokens.push_back(SpanTargets(data.sample(s), data.length(s)));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<ScoredPairs> ScorePairs(LlamaModel& model, FsdpRuntime& runtime, Backend* backend,
                                 const PreparedDataset& data, const PairScoringOptions& o) {
  if (o.micro <= 0) return InvalidArgument("pair scoring: micro must be > 0");
  if (o.world <= 0 || o.rank < 0 || o.rank >= o.world) return InvalidArgument("pair scoring: rank outside the world");
  const int64_t all = data.header().num_pairs();
  const int64_t n = o.max_pairs > 0 ? std::min(o.max_pairs, all) : all;
  Sampler order(all, /*shuffle=*/false, 0);  // PairBatcher's check; plans are built here
  PairBatcherOptions bo;
  bo.global_batch = o.micro;
  bo.seq_len = o.seq_len;
  ASSIGN_OR_RETURN(PairBatcher batcher, PairBatcher::Create(&data, &order, bo));
  ASSIGN_OR_RETURN(PairRows rows, PairRows::Create(backend, 2 * o.micro * o.seq_len));
  ScoredPairs out;
  const int64_t run = o.micro * o.world;
  for (int64_t g0 = 0; g0 < n; g0 += run) {
    std::vector<int64_t> ids;
    for (int64_t p = g0 + o.rank * o.micro; p < std::min(n, g0 + (o.rank + 1) * o.micro); ++p) ids.push_back(p);
    RETURN_IF_ERROR(ScoreRun(model, runtime, backend, data, batcher, ids, rows, o.cp, &out));
  }
  return out;
}

StatusOr<PreferenceSums> ScoredPairSums(const PreferenceConfig& config, const ScoredPairs& s,
                                        const std::vector<double>& ref) {
  PreferenceSums sums;
  for (size_t k = 0; k < s.pairs.size(); ++k) {
    const int64_t id = s.pairs[k];
    PairLogps p;
    p.chosen = s.logps[2 * k];
    p.rejected = s.logps[2 * k + 1];
    p.chosen_tokens = s.tokens[2 * k];
    p.rejected_tokens = s.tokens[2 * k + 1];
    if (config.needs_reference()) {
      if (id < 0 || 2 * id + 1 >= static_cast<int64_t>(ref.size()))
        return InvalidArgument("preference eval: no reference log-probs for pair " + std::to_string(id) + " (" +
                               std::to_string(ref.size()) + " values, two per pair)");
      p.ref_chosen = ref[2 * id];
      p.ref_rejected = ref[2 * id + 1];
    }
    sums.Add(PreferencePairLoss(config, p));
  }
  return sums;
}

}  // namespace shard
