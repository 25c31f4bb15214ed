// A batch source of the job's shapes and no data, for the memory simulator
// (a trainer on a backend that holds no data, Backend::holds_data): every
// global batch is global_batch full rows of seq_len target tokens (token 0,
// positions 0..seq_len-1; a preference job's items are pairs of two such
// rows), segmented when the job packs SFT samples — so the
// model allocates exactly what a real batch makes it allocate, and nothing is
// read from disk.
//
// Thread-safety: one thread.
#pragma once

#include <memory>

#include "shard/spec/job_config.h"
#include "shard/train/batch_source.h"

namespace shard {

std::unique_ptr<BatchSource> SyntheticBatchSource(const JobConfig& job);

}  // namespace shard
