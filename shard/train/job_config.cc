#include "shard/train/job_config.h"

#include <cmath>

#include "shard/common/yaml_config.h"
#include "shard/tensor/dtype.h"

namespace shard {

Status ModelSource::Validate() const {
  if (preset.empty() == from_hf.empty())
    return InvalidArgument("model: set exactly one of model.preset or model.from_hf");
  return OkStatus();
}

Status TrainConfig::Validate() const {
  if (steps <= 0) return InvalidArgument("train.steps must be > 0");
  if (micro_batch <= 0) return InvalidArgument("train.micro_batch must be > 0");
  if (global_batch <= 0) return InvalidArgument("train.global_batch must be > 0");
  if (log_every <= 0) return InvalidArgument("train.log_every must be > 0");
  return optim.Validate();
}

Status ParallelConfig::Validate() const {
  if (strategy != "full_shard" && strategy != "shard_grad_op" && strategy != "no_shard" &&
      strategy != "hybrid_shard")
    return InvalidArgument("parallel.strategy '" + strategy +
                           "' is not one of: full_shard, shard_grad_op, no_shard, hybrid_shard");
  if (world_size <= 0) return InvalidArgument("parallel.world_size must be > 0");
  if (shard_group_size < 0) return InvalidArgument("parallel.shard_group_size must be >= 0");
  if (!(comm_timeout_s > 0)) return InvalidArgument("parallel.comm_timeout_s must be > 0");
  return OkStatus();
}

Status CheckpointConfig::Validate() const {
  if (every_steps < 0) return InvalidArgument("checkpoint.every_steps must be >= 0");
  if (keep_last < 1) return InvalidArgument("checkpoint.keep_last must be >= 1");
  if (resume.empty()) return InvalidArgument("checkpoint.resume must be auto, none or a step directory");
  return OkStatus();
}

Status JobConfig::Validate() const {
  RETURN_IF_ERROR(model.Validate());
  RETURN_IF_ERROR(data.Validate());
  RETURN_IF_ERROR(train.Validate());
  RETURN_IF_ERROR(parallel.Validate());
  RETURN_IF_ERROR(checkpoint.Validate());
  const int64_t per_step = train.micro_batch * parallel.world_size;
  if (train.global_batch % per_step != 0)
    return InvalidArgument("train.global_batch " + std::to_string(train.global_batch) +
                           " must be a multiple of train.micro_batch x parallel.world_size = " +
                           std::to_string(per_step));
  if (!export_.hf_dir.empty()) RETURN_IF_ERROR(ParseDType(export_.dtype).status().WithContext("export.dtype"));
  return OkStatus();
}

namespace {

Status MapJob(YamlMap& root, JobConfig* job) {
  RETURN_IF_ERROR(root.Get("name", &job->name));
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("model"));
    RETURN_IF_ERROR(m.Get("preset", &job->model.preset));
    RETURN_IF_ERROR(m.Get("from_hf", &job->model.from_hf));
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("data"));
    DataConfig& d = job->data;
    RETURN_IF_ERROR(m.Get("tokens", &d.tokens));
    RETURN_IF_ERROR(m.Get("jsonl", &d.jsonl));
    RETURN_IF_ERROR(m.Get("seq_len", &d.seq_len));
    RETURN_IF_ERROR(m.Get("shuffle", &d.shuffle));
    RETURN_IF_ERROR(m.Get("prepared", &d.prepared));
    RETURN_IF_ERROR(m.Get("tokenizer", &d.tokenizer));
    RETURN_IF_ERROR(m.GetEnum("template", {"plain", "llama2", "llama3", "chatml"}, &d.chat_template));
    RETURN_IF_ERROR(m.Get("packing", &d.packing));
    RETURN_IF_ERROR(m.GetEnum("train_on", {"assistant", "all"}, &d.train_on));
    RETURN_IF_ERROR(m.GetEnum("bad_rows", {"fail", "skip"}, &d.bad_rows));
    RETURN_IF_ERROR(m.GetEnum("overlong", {"truncate", "drop"}, &d.overlong));
    // The SFT keys mean nothing to a raw token file: refuse them rather than
    // silently train on something else than the user described.
    if (!d.tokens.empty() && d.jsonl.empty()) {
      for (const char* key : {"prepared", "tokenizer", "template", "packing", "train_on", "bad_rows", "overlong"}) {
        if (m.Has(key))
          return InvalidArgument(m.Where(key) + ": only applies to SFT data (data.jsonl); data.tokens is a raw "
                                 "uint32 token file, already tokenized");
      }
    }
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("train"));
    TrainConfig& t = job->train;
    RETURN_IF_ERROR(m.Get("steps", &t.steps));
    RETURN_IF_ERROR(m.Get("global_batch", &t.global_batch));
    RETURN_IF_ERROR(m.Get("micro_batch", &t.micro_batch));
    int64_t seed = static_cast<int64_t>(t.seed);
    RETURN_IF_ERROR(m.Get("seed", &seed));
    t.seed = static_cast<uint64_t>(seed);
    RETURN_IF_ERROR(m.GetEnum("precision", {"auto", "fp32", "bf16", "fp16"}, &t.precision));
    RETURN_IF_ERROR(m.Get("log_every", &t.log_every));
    OptimConfig& o = t.optim;
    RETURN_IF_ERROR(m.Get("lr", &o.lr));
    RETURN_IF_ERROR(m.Get("min_lr_ratio", &o.min_lr_ratio));
    RETURN_IF_ERROR(m.Get("warmup_steps", &o.warmup_steps));
    RETURN_IF_ERROR(m.GetEnum("schedule", {"constant", "cosine", "linear"}, &o.schedule));
    RETURN_IF_ERROR(m.Get("weight_decay", &o.weight_decay));
    RETURN_IF_ERROR(m.Get("decay_norms_and_embeddings", &o.decay_norms_and_embeddings));
    RETURN_IF_ERROR(m.Get("grad_clip", &o.grad_clip));
    RETURN_IF_ERROR(m.Get("adam_eps", &o.eps));
    std::vector<double> betas{o.beta1, o.beta2};
    RETURN_IF_ERROR(m.Get("adam_betas", &betas));
    if (betas.size() != 2) return InvalidArgument(m.Where("adam_betas") + ": expected two numbers [beta1, beta2]");
    o.beta1 = betas[0];
    o.beta2 = betas[1];
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("parallel"));
    ParallelConfig& p = job->parallel;
    RETURN_IF_ERROR(m.GetEnum("strategy", {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard"}, &p.strategy));
    RETURN_IF_ERROR(m.Get("world_size", &p.world_size));
    RETURN_IF_ERROR(m.Get("shard_group_size", &p.shard_group_size));
    RETURN_IF_ERROR(m.Get("activation_checkpointing", &p.activation_checkpointing));
    RETURN_IF_ERROR(m.Get("offload_optimizer", &p.offload_optimizer));
    RETURN_IF_ERROR(m.Get("comm_timeout_s", &p.comm_timeout_s));
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("checkpoint"));
    CheckpointConfig& c = job->checkpoint;
    RETURN_IF_ERROR(m.Get("dir", &c.dir));
    RETURN_IF_ERROR(m.Get("every_steps", &c.every_steps));
    RETURN_IF_ERROR(m.Get("keep_last", &c.keep_last));
    RETURN_IF_ERROR(m.Get("async", &c.async));
    RETURN_IF_ERROR(m.Get("resume", &c.resume));
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("resources"));
    RETURN_IF_ERROR(m.GetEnum("launcher", {"local", "slurm", "kubernetes", "external"}, &job->resources.launcher));
    RETURN_IF_ERROR(m.Get("device", &job->resources.device));
    RETURN_IF_ERROR(m.Get("cluster", &job->resources.cluster));
    for (const char* key : {"slurm", "kubernetes"}) {
      if (m.Has(key)) return Unimplemented(m.Where(key) + ": the " + std::string(key) + " launcher is not built yet");
    }
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("restart"));
    RestartConfig& r = job->restart;
    RETURN_IF_ERROR(m.Get("max_restarts", &r.max_restarts));
    RETURN_IF_ERROR(m.Get("backoff_s", &r.backoff_s));
    RETURN_IF_ERROR(m.Get("heartbeat_timeout_s", &r.heartbeat_timeout_s));
    RETURN_IF_ERROR(m.Get("hang_timeout_s", &r.hang_timeout_s));
    RETURN_IF_ERROR(m.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap m, root.Sub("export"));
    RETURN_IF_ERROR(m.Get("hf_dir", &job->export_.hf_dir));
    RETURN_IF_ERROR(m.GetEnum("dtype", {"fp32", "bf16", "fp16"}, &job->export_.dtype));
    RETURN_IF_ERROR(m.Finish());
  }
  return root.Finish();
}

StatusOr<JobConfig> FromMap(YamlMap root, const std::string& source, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) RETURN_IF_ERROR(ApplyOverride(root.node(), o));
  JobConfig job;
  job.source = source;
  RETURN_IF_ERROR(MapJob(root, &job));
  Status st = job.Validate();
  if (!st.ok()) return Status(st.code(), source + ": " + st.message());
  return job;
}

}  // namespace

StatusOr<JobConfig> LoadJobConfig(const std::string& path, const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(YamlMap root, YamlMap::LoadFile(path));
  return FromMap(std::move(root), path, overrides);
}

StatusOr<JobConfig> ParseJobConfig(const std::string& text, const std::string& name,
                                   const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(YamlMap root, YamlMap::LoadString(text, name));
  return FromMap(std::move(root), name, overrides);
}

}  // namespace shard
