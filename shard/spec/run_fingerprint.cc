#include "shard/spec/run_fingerprint.h"

#include "shard/common/checksum.h"
#include "shard/common/format_number.h"

namespace shard {
namespace {

std::string Num(double v) { return FormatNumber("%.12g", v); }

}  // namespace

RunKeys RunKeysOf(const JobConfig& job) {
  RunKeys k;
  k["model.preset"] = job.model.preset;
  k["model.from_hf"] = job.model.from_hf;
  const DataConfig& d = job.data;
  k["data.tokens"] = d.tokens;
  k["data.jsonl"] = d.jsonl;
  k["data.tokenizer"] = d.tokenizer;
  k["data.template"] = d.chat_template;
  k["data.packing"] = d.packing ? "true" : "false";
  k["data.train_on"] = TrainOnName(d.train_on);
  k["data.overlong"] = OverlongName(d.overlong);
  k["data.seq_len"] = std::to_string(d.seq_len);
  k["data.shuffle"] = d.shuffle ? "true" : "false";
  const TrainConfig& t = job.train;
  k["train.global_batch"] = std::to_string(t.global_batch);
  k["train.seed"] = std::to_string(t.seed);
  k["train.precision"] = PrecisionName(t.precision);
  k["train.loss_scale"] = t.loss_scale.ToString();
  const OptimConfig& o = t.optim;
  k["train.lr"] = Num(o.lr);
  k["train.min_lr_ratio"] = Num(o.min_lr_ratio);
  k["train.warmup_steps"] = std::to_string(o.warmup_steps);
  k["train.schedule"] = EnumToName(kScheduleNames, o.schedule);
  k["train.beta1"] = Num(o.beta1);
  k["train.beta2"] = Num(o.beta2);
  k["train.eps"] = Num(o.eps);
  k["train.weight_decay"] = Num(o.weight_decay);
  k["train.decay_norms_and_embeddings"] = o.decay_norms_and_embeddings ? "true" : "false";
  k["train.grad_clip"] = Num(o.grad_clip);
  // Adapters on a frozen base are another run than full fine-tuning (only
  // present when peft: is, so full fine-tuning runs keep their fingerprints).
  if (job.peft.enabled()) {
    const PeftConfig& p = job.peft;
    std::string targets;
    for (LoraTarget t : p.target_modules) {
      // all-linear's MoE names (the router, qwen2_moe's shared gate) are left
      // out, so a dense model's all-linear runs keep the fingerprint they had
      // before those names existed; a MoE model's adapter shapes are checked
      // at resume (LoadLoraCheckpoint).
      if (p.all_linear && (t == LoraTarget::kRouter || t == LoraTarget::kSharedExpertGate)) continue;
      targets += (targets.empty() ? "" : ",") + std::string(LoraTargetName(t));
    }
    k["peft.method"] = PeftMethodName(p.method);
    k["peft.r"] = std::to_string(p.r);
    k["peft.alpha"] = Num(p.alpha);
    k["peft.dropout"] = Num(p.dropout);
    k["peft.target_modules"] = targets;
    k["peft.use_rslora"] = p.use_rslora ? "true" : "false";
  }
  // Another aux-loss weight is another run (only present when moe.aux_loss_coef
  // is set; absent, the model's config decides it and model.* names the model).
  if (job.moe.aux_loss_coef >= 0) k["moe.aux_loss_coef"] = Num(job.moe.aux_loss_coef);
  if (job.moe.z_loss_coef != 0) k["moe.z_loss_coef"] = Num(job.moe.z_loss_coef);  // absent when off
  // Another objective is another run (only present with preference:, so SFT
  // runs keep their fingerprints).
  if (job.preference.enabled()) {
    const PreferenceConfig& p = job.preference;
    k["preference.method"] = PreferenceMethodName(p.method);
    k["preference.beta"] = Num(p.beta);
    if (p.method == PreferenceMethod::kDpo) k["preference.label_smoothing"] = Num(p.label_smoothing);
    if (p.method == PreferenceMethod::kOrpo) k["preference.orpo_lambda"] = Num(p.orpo_lambda);
  }
  return k;
}

std::string RunFingerprint(const RunKeys& keys) {
  std::string text;
  for (const auto& [k, v] : keys) text += k + "=" + v + "\n";
  return HashToHex(Xxh64(text.data(), text.size()));
}

std::string DescribeRunDifference(const RunKeys& saved, const RunKeys& now) {
  std::string out;
  auto add = [&](const std::string& k, const std::string& a, const std::string& b) {
    out += (out.empty() ? "" : ", ") + k + " " + (a.empty() ? "(unset)" : a) + " -> " + (b.empty() ? "(unset)" : b);
  };
  for (const auto& [k, v] : saved) {
    auto it = now.find(k);
    const std::string b = it == now.end() ? "" : it->second;
    if (b != v) add(k, v, b);
  }
  for (const auto& [k, v] : now)
    if (!saved.count(k) && !v.empty()) add(k, "", v);
  return out;
}

bool IsThisRunsStep(const std::string& step_fingerprint, const std::string& my_fingerprint) {
  return step_fingerprint.empty() || step_fingerprint == my_fingerprint;
}

}  // namespace shard
