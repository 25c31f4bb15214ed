#include "shard/train/job_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "shard/common/file_util.h"
#include "shard/common/yaml_config.h"
#include "shard/optim/loss_scaler.h"
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
  if (loss_chunk_rows < 0)
    return InvalidArgument("train.loss_chunk_rows must be >= 0 (0 = auto), got " + std::to_string(loss_chunk_rows));
  if (loss_scale_window < 1)
    return InvalidArgument("train.loss_scale_window must be >= 1, got " + std::to_string(loss_scale_window));
  auto ls = ParseLossScale(loss_scale, precision, loss_scale_window);
  if (!ls.ok()) return InvalidArgument("train.loss_scale: " + ls.status().message());
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
  if (reduce_dtype != "fp32" && reduce_dtype != "bf16" && reduce_dtype != "fp16")
    return InvalidArgument("parallel.reduce_dtype '" + reduce_dtype + "' is not one of: fp32, bf16, fp16");
  return OkStatus();
}

Status CheckpointConfig::Validate() const {
  if (every_steps < 0) return InvalidArgument("checkpoint.every_steps must be >= 0");
  if (keep_last < 1) return InvalidArgument("checkpoint.keep_last must be >= 1");
  if (resume.empty()) return InvalidArgument("checkpoint.resume must be auto, none or a step directory");
  return OkStatus();
}

Status JobConfig::Validate() const {
  // The name becomes part of paths (checkpoint, state and log dirs).
  RETURN_IF_ERROR(CheckPlainName("name", name));
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
  if (resources.launcher == "slurm") RETURN_IF_ERROR(resources.slurm.Validate(parallel.world_size));
  if (resources.launcher == "kubernetes") RETURN_IF_ERROR(resources.kubernetes.Validate(parallel.world_size));
  return OkStatus();
}

int SlurmConfig::TasksPerNode(int world_size) const {
  if (tasks_per_node > 0) return tasks_per_node;
  if (gpus_per_node > 0) return gpus_per_node;
  return nodes > 0 && world_size % nodes == 0 ? world_size / nodes : world_size;
}

int SlurmConfig::Nodes(int world_size) const {
  if (nodes > 0) return nodes;
  const int t = TasksPerNode(world_size);
  return t > 0 ? (world_size + t - 1) / t : 1;
}

Status SlurmConfig::Validate(int world_size) const {
  if (nodes < 0 || tasks_per_node < 0 || gpus_per_node < 0 || cpus_per_task < 0 || signal_s < 0)
    return InvalidArgument("resources.slurm: nodes, tasks_per_node, gpus_per_node, cpus_per_task and signal_s "
                           "must not be negative");
  const int n = Nodes(world_size), t = TasksPerNode(world_size);
  if (n * t != world_size)
    return InvalidArgument("resources.slurm: " + std::to_string(n) + " node(s) x " + std::to_string(t) +
                           " task(s) per node is not parallel.world_size " + std::to_string(world_size));
  if (gpus_per_node > 0 && gpus_per_node % t != 0)
    return InvalidArgument("resources.slurm: gpus_per_node " + std::to_string(gpus_per_node) +
                           " is not a multiple of tasks_per_node " + std::to_string(t));
  if (poll_interval_s <= 0) return InvalidArgument("resources.slurm.poll_interval_s must be positive");
  auto safe = [](const std::string& v) { return v.find_first_of("\n\r") == std::string::npos; };
  for (const std::string* v : {&partition, &account, &qos, &time, &mem})
    if (!safe(*v)) return InvalidArgument("resources.slurm: a value holds a line break: '" + *v + "'");
  for (const auto& a : sbatch_args)
    if (!safe(a) || a.rfind("-", 0) != 0)
      return InvalidArgument("resources.slurm.sbatch_args: '" + a + "' must be one option starting with '-'");
  for (const auto& [k, v] : env) {
    const bool name_ok = !k.empty() && !std::isdigit(static_cast<unsigned char>(k[0])) &&
                         std::all_of(k.begin(), k.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    if (!name_ok || !safe(v)) return InvalidArgument("resources.slurm.env: '" + k + "' is not a valid variable");
  }
  return OkStatus();
}

int KubernetesConfig::ProcsPerNode(int world_size) const {
  if (procs_per_node > 0) return procs_per_node;
  if (gpus_per_node > 0) return gpus_per_node;
  return nodes > 0 && world_size % nodes == 0 ? world_size / nodes : 1;
}

int KubernetesConfig::Nodes(int world_size) const {
  if (nodes > 0) return nodes;
  const int p = ProcsPerNode(world_size);
  return p > 0 ? (world_size + p - 1) / p : 1;
}

Status KubernetesConfig::Validate(int world_size) const {
  if (image.empty()) return InvalidArgument("resources.kubernetes.image is required (the worker image)");
  if (pvc.empty())
    return InvalidArgument("resources.kubernetes.pvc is required (the claim that holds the job's directory and "
                           "checkpoints, mounted by the coordinator too)");
  if (nodes < 0 || gpus_per_node < 0 || procs_per_node < 0 || active_deadline_s < 0 || termination_grace_s < 0)
    return InvalidArgument("resources.kubernetes: nodes, gpus_per_node, procs_per_node, active_deadline_s and "
                           "termination_grace_s must not be negative");
  const int n = Nodes(world_size), p = ProcsPerNode(world_size);
  if (n * p != world_size)
    return InvalidArgument("resources.kubernetes: " + std::to_string(n) + " pod(s) x " + std::to_string(p) +
                           " worker(s) per pod is not parallel.world_size " + std::to_string(world_size));
  if (gpus_per_node > 0 && gpus_per_node % p != 0)
    return InvalidArgument("resources.kubernetes: gpus_per_node " + std::to_string(gpus_per_node) +
                           " is not a multiple of procs_per_node " + std::to_string(p));
  if (mount_path.empty() || mount_path[0] != '/')
    return InvalidArgument("resources.kubernetes.mount_path must be absolute, got '" + mount_path + "'");
  if (poll_interval_s <= 0) return InvalidArgument("resources.kubernetes.poll_interval_s must be positive");
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
    RETURN_IF_ERROR(m.Get("loss_chunk_rows", &t.loss_chunk_rows));
    if (t.loss_chunk_rows < 0)
      return InvalidArgument(m.Where("loss_chunk_rows") + ": must be >= 0 (0 = auto), got " +
                             std::to_string(t.loss_chunk_rows));
    // A word or a number: read as text, checked here so the error names the file.
    RETURN_IF_ERROR(m.Get("loss_scale", &t.loss_scale));
    RETURN_IF_ERROR(m.Get("loss_scale_window", &t.loss_scale_window));
    if (auto ls = ParseLossScale(t.loss_scale, t.precision, std::max<int64_t>(t.loss_scale_window, 1)); !ls.ok())
      return InvalidArgument(m.Where("loss_scale") + ": " + ls.status().message());
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
    RETURN_IF_ERROR(m.GetEnum("reduce_dtype", {"fp32", "bf16", "fp16"}, &p.reduce_dtype));
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
    {
      ASSIGN_OR_RETURN(YamlMap s, m.Sub("slurm"));
      SlurmConfig& c = job->resources.slurm;
      RETURN_IF_ERROR(s.Get("nodes", &c.nodes));
      RETURN_IF_ERROR(s.Get("tasks_per_node", &c.tasks_per_node));
      RETURN_IF_ERROR(s.Get("gpus_per_node", &c.gpus_per_node));
      RETURN_IF_ERROR(s.GetEnum("gpu_request", {"gpus-per-task", "gres"}, &c.gpu_request));
      RETURN_IF_ERROR(s.Get("cpus_per_task", &c.cpus_per_task));
      RETURN_IF_ERROR(s.Get("partition", &c.partition));
      RETURN_IF_ERROR(s.Get("account", &c.account));
      RETURN_IF_ERROR(s.Get("qos", &c.qos));
      RETURN_IF_ERROR(s.Get("time", &c.time));
      RETURN_IF_ERROR(s.Get("mem", &c.mem));
      RETURN_IF_ERROR(s.Get("requeue", &c.requeue));
      RETURN_IF_ERROR(s.Get("signal_s", &c.signal_s));
      RETURN_IF_ERROR(s.Get("sbatch_args", &c.sbatch_args));
      RETURN_IF_ERROR(s.Get("setup", &c.setup));
      RETURN_IF_ERROR(s.Get("env", &c.env));
      RETURN_IF_ERROR(s.Get("poll_interval_s", &c.poll_interval_s));
      RETURN_IF_ERROR(s.Finish());
    }
    {
      ASSIGN_OR_RETURN(YamlMap k, m.Sub("kubernetes"));
      KubernetesConfig& c = job->resources.kubernetes;
      RETURN_IF_ERROR(k.Get("namespace", &c.namespace_));
      RETURN_IF_ERROR(k.Get("image", &c.image));
      RETURN_IF_ERROR(k.GetEnum("image_pull_policy", {"Always", "IfNotPresent", "Never"}, &c.image_pull_policy));
      RETURN_IF_ERROR(k.Get("nodes", &c.nodes));
      RETURN_IF_ERROR(k.Get("gpus_per_node", &c.gpus_per_node));
      RETURN_IF_ERROR(k.Get("procs_per_node", &c.procs_per_node));
      RETURN_IF_ERROR(k.Get("cpu", &c.cpu));
      RETURN_IF_ERROR(k.Get("memory", &c.memory));
      RETURN_IF_ERROR(k.Get("pvc", &c.pvc));
      RETURN_IF_ERROR(k.Get("mount_path", &c.mount_path));
      RETURN_IF_ERROR(k.Get("service_account", &c.service_account));
      RETURN_IF_ERROR(k.Get("coordinator", &c.coordinator));
      RETURN_IF_ERROR(k.Get("node_selector", &c.node_selector));
      RETURN_IF_ERROR(k.Get("labels", &c.labels));
      RETURN_IF_ERROR(k.Get("env", &c.env));
      RETURN_IF_ERROR(k.Get("active_deadline_s", &c.active_deadline_s));
      RETURN_IF_ERROR(k.Get("termination_grace_s", &c.termination_grace_s));
      RETURN_IF_ERROR(k.Get("poll_interval_s", &c.poll_interval_s));
      RETURN_IF_ERROR(k.Finish());
    }
    // A cluster launcher asked for GPUs: auto means them, even where a
    // worker sees fewer GPUs than its host has ranks (one per task).
    ResourcesConfig& r = job->resources;
    if (r.device == "auto" && ((r.launcher == "slurm" && r.slurm.gpus_per_node > 0) ||
                               (r.launcher == "kubernetes" && r.kubernetes.gpus_per_node > 0)))
      r.device = "cuda";
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
