// The job's training data as a BatchSource (batch_source.h): token windows
// (data.tokens), packed SFT samples or, under preference:, pairs
// (pair_source.h) from data.jsonl prepared at SftPreparedPrefix.
#pragma once

#include <cstdint>
#include <memory>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"
#include "shard/train/batch_source.h"

namespace shard {

// Opens the job's data source; the SFT dataset must already be prepared (see
// SftPrepareOptions / EnsurePrepared). Checks every token id < vocab_size.
StatusOr<std::unique_ptr<BatchSource>> OpenBatchSource(const JobConfig& job, int64_t vocab_size);

}  // namespace shard
