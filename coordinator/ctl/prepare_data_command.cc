#include "coordinator/ctl/prepare_data_command.h"

#include <algorithm>
#include <cstdio>

#include "shard/data/prepare_sft.h"

namespace shardctl {

shard::Status RunPrepareData(const PrepareDataOptions& o) {
  shard::PrepareSftOptions p;
  p.input = o.input;
  p.tokenizer = o.tokenizer;
  p.chat_template = o.chat_template;
  p.seq_len = o.seq_len;
  p.out = o.out;
  p.train_on = o.train_on;
  p.format = o.format;
  p.bad_rows = o.bad_rows;
  p.threads = o.threads;
  ASSIGN_OR_RETURN(shard::PrepareSftResult r, shard::PrepareSftData(p));
  const shard::PreparedHeader& h = r.header;
  if (o.json) {
    std::printf("%s", h.ToJson().c_str());
    return shard::OkStatus();
  }
  std::printf("prepared %lld samples (%lld tokens, %lld targets) from %s: %lld rows, %lld bad rows skipped, "
              "%lld longer than seq_len %lld+1; %.2f s, %.1f MB/s, %.0f tokens/s -> %s.{tokens,mask,index,json}\n",
              static_cast<long long>(h.num_samples), static_cast<long long>(h.num_tokens),
              static_cast<long long>(h.num_target_tokens), o.input.c_str(), static_cast<long long>(h.rows_read),
              static_cast<long long>(h.bad_rows_skipped), static_cast<long long>(h.longer_than_seq_len),
              static_cast<long long>(h.seq_len), r.seconds, h.source_bytes / 1e6 / std::max(r.seconds, 1e-9),
              h.num_tokens / std::max(r.seconds, 1e-9), o.out.c_str());
  if (h.identical_pairs > 0)
    std::printf("%lld pairs have the same chosen and rejected reply (the first at %s:%lld): they train nothing\n",
                static_cast<long long>(h.identical_pairs), o.input.c_str(),
                static_cast<long long>(r.identical_pairs_first_line));
  return shard::OkStatus();
}

}  // namespace shardctl
