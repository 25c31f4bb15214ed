// The BatchSource of a preference: job: whole pairs from a prepared dataset
// of pairs (PairBatcher), two rows an item — chosen, then rejected — so a
// rank's share and every micro-batch hold both replies of each pair.
#pragma once

#include <memory>
#include <string>

#include "shard/data/prepared_dataset.h"
#include "shard/spec/job_config.h"
#include "shard/train/batch_source.h"

namespace shard {

StatusOr<std::unique_ptr<BatchSource>> OpenPairSource(const JobConfig& job, PreparedDataset data);

// What identifies a prepared set of pairs (its source, tokenizer, template,
// count, seq_len and overlong): the pair source's Fingerprint, and the data
// half of the key of the reference log-probs stored beside it.
std::string PairsFingerprint(const PreparedHeader& header);

}  // namespace shard
