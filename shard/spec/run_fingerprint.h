// What defines a training run, so a checkpoint directory can tell its own
// steps from another run's (issue 18 item 3): the model, the data and how it
// is cut, the batch, the optimizer and schedule shape, the seed and the
// precision. Not train.steps (raising it continues a run), not the parallel
// layout (resume reshards), and not checkpoint, restart, resources, export or
// logging settings.
//
// The keys are written into every COMMITTED manifest ("run": fingerprint and
// keys), so a refusal can name what differs.
#pragma once

#include <map>
#include <string>

#include "shard/spec/job_config.h"

namespace shard {

using RunKeys = std::map<std::string, std::string>;

// Pure: the defining keys of a job, as dotted job-file keys → canonical text.
RunKeys RunKeysOf(const JobConfig& job);
// Pure: 16 hex digits (xxh64 over the sorted "key=value" lines).
std::string RunFingerprint(const RunKeys& keys);
// Pure: "train.optim.lr 0.003 -> 0.001, data.seq_len 64 -> 128" (keys only on
// one side show as "(unset)"); "" when the keys agree.
std::string DescribeRunDifference(const RunKeys& saved, const RunKeys& now);

// The filter that keeps a search to this run's steps (and unknown ones).
bool IsThisRunsStep(const std::string& step_fingerprint, const std::string& my_fingerprint);

}  // namespace shard
