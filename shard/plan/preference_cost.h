// The reference pass of a dpo/ipo job (shard/train/preference_training.cc),
// priced: before step 1 the ranks score every training pair once with the
// starting weights — each rank its contiguous share, micro_batch pairs
// (2·micro_batch rows) per forward, sharded as training is — and rank 0
// stores two doubles per pair beside the prepared data, which every rank
// then holds in host memory for the run.
//
//   forward   one micro-batch of the pass: the step's compute at the
//             forward's share of its FLOPs (2N + the attention's forward per
//             token of the hardware FLOPs StepTime counts) beside one
//             all-gather of every unit (the gathers overlap the compute:
//             the larger of the two)
//   pass      ceil(ceil(pairs / world) / micro-batch pairs) forwards
//   file      8 B per reply, 16 B per pair, + 24 B (magic, count, checksum)
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "shard/plan/step_time.h"
#include "shard/plan/workload.h"

namespace shard::plan {

struct ReferenceCost {
  int64_t pairs = 0;        // training pairs priced (0: unknown; the per-pair figures still hold)
  int64_t forwards = 0;     // micro-batches per rank
  double forward_s = 0;     // one micro-batch's forward
  double pass_s = 0;        // the whole pass, once per data and model
  int64_t file_bytes = 0;   // the stored values on disk (and held by every rank in host memory)
};

// Bytes of the stored reference of `pairs` pairs.
int64_t ReferenceFileBytes(int64_t pairs);

// w: the workload as planned (micro_batch in rows: 2 per pair); t: its step time.
ReferenceCost PriceReferencePass(const Workload& w, const StepTime& t, int64_t pairs);

}  // namespace shard::plan
