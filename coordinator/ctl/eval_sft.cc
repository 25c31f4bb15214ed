// shardctl eval --data: loss and exact-match accuracy of greedy answers on SFT
// data (shard/train/sft_eval.h), from a prepared prefix or a JSONL file
// prepared into a temporary directory first.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "coordinator/ctl/commands.h"
#include "shard/data/prepare_sft.h"
#include "shard/data/prepared_dataset.h"
#include "shard/data/tokenizer.h"
#include "shard/train/local_params.h"
#include "shard/train/peft_inference.h"
#include "shard/train/sft_eval.h"

namespace shardctl {

namespace fs = std::filesystem;
using shard::Status;

namespace {

// A directory removed when it goes out of scope.
struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

std::string Show(const shard::Tokenizer* tok, const std::vector<int32_t>& ids) {
  // Quoted with escapes visible; bytes that are not UTF-8 (an untrained model's
  // answers) print as U+FFFD.
  if (tok) return nlohmann::json(tok->Decode(ids)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

// --tokenizer, else the model folder's own tokenizer files (as a job started
// from that folder tokenizes: DataConfig::ResolveTokenizer), else byte (a
// checkpoint step folder, or a folder without tokenizer files).
std::string DataTokenizer(const EvalOptions& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  std::error_code ec;
  for (const char* f : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(fs::path(o.model) / f, ec)) return o.model;
  return "byte";
}

}  // namespace

Status RunEvalSft(const EvalOptions& o) {
  if (o.batch <= 0) return shard::InvalidArgument("--batch must be > 0");
  if (o.seq_len < 0) return shard::InvalidArgument("--seq-len must be >= 0");
  if (o.max_samples < 0) return shard::InvalidArgument("--max-samples must be >= 0");
  std::string prefix = o.data;
  TempDir tmp;
  const bool prepared = fs::exists(o.data + ".json");
  if (!prepared) {
    std::error_code ec;
    if (!fs::is_regular_file(o.data, ec))
      return shard::NotFound("--data " + o.data + ": neither a prepared dataset (" + o.data +
                             ".json) nor a JSONL file");
    std::string tmpl = (fs::temp_directory_path() / "shardctl-eval-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) return shard::Internal("cannot create a temporary directory under " +
                                                        fs::temp_directory_path().string());
    tmp.path = tmpl;
    shard::PrepareSftOptions p;
    p.input = o.data;
    p.tokenizer = DataTokenizer(o);
    p.chat_template = o.chat_template;
    p.train_on = o.train_on;
    p.seq_len = o.seq_len > 0 ? o.seq_len : 1 << 20;  // only counts over-long rows here
    p.out = prefix = tmp.path + "/data";
    RETURN_IF_ERROR(shard::PrepareSftData(p).status().WithContext("eval --data " + o.data));
  }
  ASSIGN_OR_RETURN(shard::PreparedDataset data, shard::PreparedDataset::Open(prefix));
  ASSIGN_OR_RETURN(shard::LoadedModel m, shard::LoadModelForInference(o.model, o.device));
  if (!o.adapter.empty()) RETURN_IF_ERROR(shard::MergePeftAdapterInto(o.adapter, &m));
  shard::SftEvalOptions eo;
  eo.seq_len = o.seq_len;
  eo.batch = o.batch;
  eo.max_samples = o.max_samples;
  eo.keep_answers = o.show;
  auto r = shard::EvaluateSft(m.config, m.backend.get(), *m.params, data, eo);
  if (!r.ok()) return r.status().WithContext("eval --data " + o.data);
  if (o.json) {
    nlohmann::json j{{"loss", r->loss},          {"tokens", r->target_tokens}, {"samples", r->samples},
                     {"scored", r->scored},      {"exact", r->exact},          {"exact_match", r->exact_match()},
                     {"seq_len", r->seq_len}};
    std::printf("%s\n", j.dump().c_str());
    return shard::OkStatus();
  }
  std::printf("loss %.6f over %lld target tokens (%lld samples, rows of %lld)\n", r->loss,
              static_cast<long long>(r->target_tokens), static_cast<long long>(r->samples),
              static_cast<long long>(r->seq_len));
  std::printf("exact match %lld/%lld = %.1f%% (greedy answers compared by token ids)\n",
              static_cast<long long>(r->exact), static_cast<long long>(r->scored), 100.0 * r->exact_match());
  if (!r->answers.empty()) {
    // The tokenizer the data was prepared with, to print text; ids otherwise.
    auto tok = shard::LoadTokenizer(data.header().tokenizer_spec);
    const shard::Tokenizer* t = tok.ok() ? tok->get() : nullptr;
    for (const auto& a : r->answers)
      std::printf("  %s %s -> %s (expected %s)\n", a.match ? "ok  " : "MISS", Show(t, a.prompt).c_str(),
                  Show(t, a.greedy).c_str(), Show(t, a.expected).c_str());
  }
  return shard::OkStatus();
}

}  // namespace shardctl
