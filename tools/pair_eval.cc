// pair_eval: a policy against its reference on held-out preference pairs, the
// figures of the DPO demo (deploy/local/dpo_demo.sh, docs/preference.md).
//
//   pair_eval --policy DIR --reference DIR --data PAIRS.jsonl|PREFIX
//             [--tokenizer T] [--template plain] [--seq-len N] [--batch B]
//             [--beta 0.1] [--device auto] [--json]
//
// --seq-len (default: the longest reply) fits longer pairs as training does
// (overlong: truncate); a prepared PREFIX keeps the length it was prepared for.
//
// Each reply's log-prob is the sum over its target tokens (the reply and its
// end-of-turn token), rendered exactly as training renders it (a JSONL file is
// prepared into a temporary directory first). Printed, over the pairs:
//   reward accuracy      TRL's rewards/accuracies: the fraction where the
//                        chosen reply's log-prob margin over the reference is
//                        larger than the rejected one's (0 when the policy is
//                        the reference: every margin is 0)
//   preference accuracy  the fraction where a model gives the chosen reply the
//                        higher log-prob, for the policy and the reference
//   rewards / logps      TRL's means (rewards = beta · margin over the reference)
// Both models are HF folders or committed checkpoint step folders of the same
// vocabulary. This is the demo's scorer until a preference job's `eval:`
// reports the same figures during training (issue 31).
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shard/common/logging.h"
#include "shard/data/pair_batcher.h"
#include "shard/data/prepare_sft.h"
#include "shard/data/sampler.h"
#include "shard/train/local_params.h"
#include "shard/train/preference_objective.h"

namespace fs = std::filesystem;
using shard::Status;
using shard::StatusOr;

namespace {

struct Options {
  std::string policy, reference, data, tokenizer, chat_template = "plain", device = "auto";
  int64_t seq_len = 0, batch = 16;
  double beta = 0.1;
  bool json = false;
};

struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// Summed target log-probs of every reply of `ds` (chosen, rejected, ...) under `dir`'s weights.
StatusOr<std::vector<double>> ReplyLogpsOf(const std::string& dir, const Options& o, const shard::PreparedDataset& ds,
                                           int64_t T) {
  ASSIGN_OR_RETURN(shard::LoadedModel m, shard::LoadModelForInference(dir, o.device));
  RETURN_IF_ERROR(ds.CheckVocab(m.config.vocab_size).WithContext(dir));
  if (T > m.config.max_position_embeddings)
    return shard::InvalidArgument(dir + ": --seq-len " + std::to_string(T) + " exceeds max_position_embeddings " +
                                  std::to_string(m.config.max_position_embeddings));
  const int64_t N = ds.header().num_pairs(), B = std::max<int64_t>(1, std::min(o.batch, N));
  shard::ModelOptions mo;
  mo.max_batch = 2 * B;
  mo.max_seq = T;
  ASSIGN_OR_RETURN(auto model, shard::LlamaModel::Create(m.config, m.backend.get(), mo));
  shard::Sampler order(N, /*shuffle=*/false, 0);
  shard::PairBatcherOptions po;
  po.global_batch = B;
  po.seq_len = T;
  ASSIGN_OR_RETURN(shard::PairBatcher batcher, shard::PairBatcher::Create(&ds, &order, po));
  const int64_t rows = 2 * B * T;
  std::vector<int32_t> tok(rows), tgt(rows), pos(rows), seg(rows);
  ASSIGN_OR_RETURN(auto dt, shard::DeviceBuffer::Create(m.backend.get(), rows));
  ASSIGN_OR_RETURN(auto dg, shard::DeviceBuffer::Create(m.backend.get(), rows));
  ASSIGN_OR_RETURN(auto dp, shard::DeviceBuffer::Create(m.backend.get(), rows));
  std::vector<double> out;
  for (int64_t first = 0; first < N; first += B) {
    const int64_t n = std::min(B, N - first);
    const shard::PairPlan plan = batcher.PlanGlobalBatch(first);
    batcher.FillPairs(plan, 0, n, tok.data(), tgt.data(), pos.data(), seg.data());
    const size_t bytes = static_cast<size_t>(2 * n * T) * sizeof(int32_t);
    m.backend->CopyToDevice(dt.data(), tok.data(), bytes);
    m.backend->CopyToDevice(dg.data(), tgt.data(), bytes);
    m.backend->CopyToDevice(dp.data(), pos.data(), bytes);
    shard::DeviceBatch b{2 * n, T, dt.as_int(), dg.as_int(), dp.as_int(), nullptr};
    ASSIGN_OR_RETURN(std::vector<double> l, shard::ReplyLogps(*model, *m.params, b));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

Status Run(const Options& o) {
  if (o.policy.empty() || o.reference.empty() || o.data.empty())
    return shard::InvalidArgument("pair_eval: --policy, --reference and --data are required (see --help)");
  if (o.batch <= 0 || o.seq_len < 0 || o.beta <= 0)
    return shard::InvalidArgument("pair_eval: --batch and --beta must be > 0, --seq-len >= 0");
  std::string prefix = o.data;
  TempDir tmp;
  if (!fs::exists(o.data + ".json")) {
    std::string t = (fs::temp_directory_path() / "pair-eval-XXXXXX").string();
    if (!::mkdtemp(t.data())) return shard::Internal("cannot create a temporary directory for --data " + o.data);
    tmp.path = t;
    shard::PrepareSftOptions p;
    p.input = o.data;
    p.tokenizer = !o.tokenizer.empty()                                 ? o.tokenizer
                  : fs::exists(fs::path(o.policy) / "tokenizer.json") ? o.policy
                                                                       : "byte";
    p.chat_template = o.chat_template;
    p.format = shard::SftFormat::kPreference;
    p.out = prefix = tmp.path + "/pairs";
    p.seq_len = o.seq_len;
    if (p.seq_len == 0) {
      // Rows as long as the longest reply: measured on a first preparation
      // that fits nothing, then prepared for that length (pairs are fitted to
      // the length they are batched at).
      p.seq_len = 1 << 20;
      RETURN_IF_ERROR(shard::PrepareSftData(p).status().WithContext("--data " + o.data));
      ASSIGN_OR_RETURN(shard::PreparedDataset all, shard::PreparedDataset::Open(prefix));
      p.seq_len = 1;
      for (int64_t i = 0; i < all.num_samples(); ++i) p.seq_len = std::max(p.seq_len, all.length(i) - 1);
    }
    RETURN_IF_ERROR(shard::PrepareSftData(p).status().WithContext("--data " + o.data));
  }
  ASSIGN_OR_RETURN(shard::PreparedDataset ds, shard::PreparedDataset::Open(prefix));
  const int64_t N = ds.header().num_pairs(), T = ds.header().seq_len;
  if (N <= 0) return shard::InvalidArgument("--data " + o.data + ": no preference pairs");
  if (o.seq_len > 0 && o.seq_len != T)
    return shard::InvalidArgument("--seq-len " + std::to_string(o.seq_len) + ": --data " + o.data +
                                  " was prepared for seq_len " + std::to_string(T));
  ASSIGN_OR_RETURN(std::vector<double> pol, ReplyLogpsOf(o.policy, o, ds, T));
  ASSIGN_OR_RETURN(std::vector<double> ref, ReplyLogpsOf(o.reference, o, ds, T));
  int64_t reward_acc = 0, pol_pref = 0, ref_pref = 0;
  double rc = 0, rr = 0, lc = 0, lr = 0;
  for (int64_t i = 0; i < N; ++i) {
    const double mc = pol[2 * i] - ref[2 * i], mr = pol[2 * i + 1] - ref[2 * i + 1];
    reward_acc += mc > mr;
    pol_pref += pol[2 * i] > pol[2 * i + 1];
    ref_pref += ref[2 * i] > ref[2 * i + 1];
    rc += o.beta * mc;
    rr += o.beta * mr;
    lc += pol[2 * i];
    lr += pol[2 * i + 1];
  }
  const double n = static_cast<double>(N);
  if (o.json) {
    nlohmann::json j{{"pairs", N},
                     {"seq_len", T},
                     {"reward_accuracy", reward_acc / n},
                     {"policy_preference_accuracy", pol_pref / n},
                     {"reference_preference_accuracy", ref_pref / n},
                     {"rewards/chosen", rc / n},
                     {"rewards/rejected", rr / n},
                     {"rewards/margins", (rc - rr) / n},
                     {"logps/chosen", lc / n},
                     {"logps/rejected", lr / n}};
    std::printf("%s\n", j.dump().c_str());
    return shard::OkStatus();
  }
  std::printf("%lld held-out pairs (rows of %lld), policy %s, reference %s\n", static_cast<long long>(N),
              static_cast<long long>(T), o.policy.c_str(), o.reference.c_str());
  std::printf("reward accuracy %lld/%lld = %.1f%% (chosen's log-prob margin over the reference > rejected's)\n",
              static_cast<long long>(reward_acc), static_cast<long long>(N), 100.0 * reward_acc / n);
  std::printf("preference accuracy: policy %.1f%%, reference %.1f%% (log p(chosen) > log p(rejected))\n",
              100.0 * pol_pref / n, 100.0 * ref_pref / n);
  std::printf("rewards/chosen %.4f  rewards/rejected %.4f  rewards/margins %.4f (beta %g)  logps/chosen %.4f  "
              "logps/rejected %.4f\n",
              rc / n, rr / n, (rc - rr) / n, o.beta, lc / n, lr / n);
  return shard::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "pair_eval: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--policy") o.policy = value("--policy");
    else if (a == "--reference") o.reference = value("--reference");
    else if (a == "--data") o.data = value("--data");
    else if (a == "--tokenizer") o.tokenizer = value("--tokenizer");
    else if (a == "--template") o.chat_template = value("--template");
    else if (a == "--device") o.device = value("--device");
    else if (a == "--seq-len") o.seq_len = std::atoll(value("--seq-len").c_str());
    else if (a == "--batch") o.batch = std::atoll(value("--batch").c_str());
    else if (a == "--beta") o.beta = std::atof(value("--beta").c_str());
    else if (a == "--json") o.json = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: pair_eval --policy DIR --reference DIR --data PAIRS.jsonl|PREFIX [--tokenizer T] "
                  "[--template plain] [--seq-len N] [--batch B] [--beta 0.1] [--device auto] [--json]\n");
      return 0;
    } else {
      std::fprintf(stderr, "pair_eval: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  shard::InitLogging("warn");
  const Status s = Run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "pair_eval: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
