// The job file's eval section: a held-out SFT set scored while training runs.
//
//   eval: {data: held-out.jsonl, every_steps: 50, max_samples: 200, exact_match: true}
//
// The JSONL is prepared like data.jsonl (same tokenizer, template, train_on,
// format) into <checkpoint.dir>/<job>/data/eval; every every_steps steps (and
// after the last) the ranks score it together — each its share of the samples
// through the sharded weights — and the mean loss per target token (and the
// greedy exact match of the last reply, when asked) is logged and stored with
// that step's metrics (StepMetrics::eval_*). A preference: job's eval.data
// holds pairs, scored with TRL's metrics (docs/preference.md, "Eval on
// pairs"); max_samples then counts pairs and exact_match is refused.
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"

namespace shard {

struct EvalConfig {
  std::string data;          // held-out JSONL; "" = no evaluation
  int64_t every_steps = 0;   // 0 = only after the last step
  int64_t max_samples = 0;   // the first N samples; 0 = all
  bool exact_match = false;  // also greedy-decode each sample's last reply

  bool enabled() const { return !data.empty(); }
  // sft: the job trains on data.jsonl (eval needs its tokenizer and template).
  Status Validate(bool sft) const;
};

}  // namespace shard
