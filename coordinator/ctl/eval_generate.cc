#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "coordinator/ctl/commands.h"
#include "shard/data/token_windows.h"
#include "shard/model/llama_model.h"
#include "shard/train/local_params.h"
#include "shard/train/peft_inference.h"

namespace shardctl {

using shard::Status;
using shard::StatusOr;

StatusOr<std::vector<int32_t>> ParseTokenList(const std::string& text) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty() || item.find_first_not_of("0123456789 ") != std::string::npos)
      return shard::InvalidArgument("--prompt-tokens: '" + item + "' is not a token id (expected e.g. 1,2,3)");
    long long v = std::stoll(item);
    if (v > INT32_MAX) return shard::InvalidArgument("--prompt-tokens: " + item + " is too large");
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Status RunEval(const EvalOptions& o) {
  if (o.tokens.empty() == o.data.empty())
    return shard::InvalidArgument("eval: give exactly one of --tokens FILE (raw uint32 tokens) or --data PREFIX|F.jsonl");
  if (!o.data.empty()) return RunEvalSft(o);
  if (o.seq_len <= 0) return shard::InvalidArgument("--seq-len must be > 0");
  if (o.batch <= 0) return shard::InvalidArgument("--batch must be > 0");
  ASSIGN_OR_RETURN(shard::LoadedModel m, shard::LoadModelForInference(o.model, o.device));
  if (!o.adapter.empty()) RETURN_IF_ERROR(shard::MergePeftAdapterInto(o.adapter, &m));
  if (o.seq_len > m.config.max_position_embeddings)
    return shard::InvalidArgument("--seq-len exceeds the model's max_position_embeddings");
  ASSIGN_OR_RETURN(shard::TokenWindows data, shard::TokenWindows::Open(o.tokens, o.seq_len, m.config.vocab_size));
  int64_t windows = data.num_windows();
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  const int64_t B = std::min(o.batch, windows), T = o.seq_len;
  shard::ModelOptions mo;
  mo.max_batch = B;
  mo.max_seq = T;
  ASSIGN_OR_RETURN(auto model, shard::LlamaModel::Create(m.config, m.backend.get(), mo));
  std::vector<int32_t> tok(B * T), tgt(B * T), pos(B * T);
  ASSIGN_OR_RETURN(auto d_tok, shard::DeviceBuffer::Create(m.backend.get(), B * T));
  ASSIGN_OR_RETURN(auto d_tgt, shard::DeviceBuffer::Create(m.backend.get(), B * T));
  ASSIGN_OR_RETURN(auto d_pos, shard::DeviceBuffer::Create(m.backend.get(), B * T));
  double loss_sum = 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    int64_t nb = std::min(B, windows - w0);
    for (int64_t i = 0; i < nb; ++i) data.Window(w0 + i, &tok[i * T], &tgt[i * T], &pos[i * T]);
    size_t bytes = static_cast<size_t>(nb * T) * sizeof(int32_t);
    m.backend->CopyToDevice(d_tok.data(), tok.data(), bytes);
    m.backend->CopyToDevice(d_tgt.data(), tgt.data(), bytes);
    m.backend->CopyToDevice(d_pos.data(), pos.data(), bytes);
    shard::DeviceBatch b{nb, T, d_tok.as_int(), d_tgt.as_int(), d_pos.as_int(), nullptr};
    ASSIGN_OR_RETURN(double l, model->ForwardLoss(b, *m.params));
    loss_sum += l;
    count += nb * T;
  }
  double loss = loss_sum / static_cast<double>(count);
  if (o.json) {
    std::printf("%s\n", nlohmann::json{{"loss", loss}, {"tokens", count}}.dump().c_str());
  } else {
    std::printf("loss %.6f over %lld target tokens (%lld windows of %lld)\n", loss, static_cast<long long>(count),
                static_cast<long long>(windows), static_cast<long long>(T));
  }
  return shard::OkStatus();
}

}  // namespace shardctl
