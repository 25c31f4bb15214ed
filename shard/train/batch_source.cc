#include "shard/train/batch_source.h"

#include <filesystem>

#include "shard/spec/job_config.h"

namespace shard {

std::string SftPreparedPrefix(const JobConfig& job) {
  if (!job.data.prepared.empty()) return job.data.prepared;
  return (std::filesystem::path(CheckpointJobDir(job)) / "data" / "sft").string();
}

PrepareSftOptions SftPrepareOptions(const JobConfig& job) {
  PrepareSftOptions o;
  o.input = job.data.jsonl;
  o.tokenizer = job.data.tokenizer;
  o.chat_template = job.data.chat_template;
  o.seq_len = job.data.seq_len;
  o.train_on = job.data.train_on;
  o.format = job.data.format;
  o.bad_rows = job.data.bad_rows;
  o.overlong = job.data.overlong;  // pairs are fitted when prepared
  o.out = SftPreparedPrefix(job);
  return o;
}

}  // namespace shard
