#include "shard/spec/job_config.h"

#include "shard/spec/context_parallel.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <xxhash.h>

#include "shard/common/file_util.h"
#include "shard/common/format_number.h"
#include "shard/common/yaml_config.h"
#include "shard/spec/context_parallel.h"
#include "shard/spec/elastic_world.h"
#include "shard/spec/loss_scale.h"
#include "shard/spec/yaml_enum.h"

namespace shard {

std::string DeviceSpec::ToString() const {
  switch (kind) {
    case Kind::kAuto: return "auto";
    case Kind::kCpu: return "cpu";
    case Kind::kCuda: return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
  return "?";
}

StatusOr<DeviceSpec> ParseDeviceSpec(const std::string& text) {
  DeviceSpec d;
  if (text == "auto") return d;
  if (text == "cpu" || text == "cuda") {
    d.kind = text == "cpu" ? DeviceSpec::Kind::kCpu : DeviceSpec::Kind::kCuda;
    return d;
  }
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8 &&
      std::all_of(text.begin() + 5, text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    d.kind = DeviceSpec::Kind::kCuda;
    d.index = std::stoi(text.substr(5));
    return d;
  }
  return InvalidArgument("'" + text + "' is not one of: auto, cpu, cuda, cuda:N");
}

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
  auto ls = ResolveLossScale(loss_scale, precision == Precision::kFp16, loss_scale_window);
  if (!ls.ok()) return InvalidArgument("train.loss_scale: " + ls.status().message());
  return optim.Validate();
}

Status ParallelConfig::Validate() const {
  if (world_size <= 0) return InvalidArgument("parallel.world_size must be > 0");
  if (shard_group_size < 0) return InvalidArgument("parallel.shard_group_size must be >= 0");
  if (!(comm_timeout_s > 0)) return InvalidArgument("parallel.comm_timeout_s must be > 0");
  return OkStatus();
}

Status CheckpointConfig::Validate() const {
  if (every_steps < 0) return InvalidArgument("checkpoint.every_steps must be >= 0");
  if (keep_last < 1) return InvalidArgument("checkpoint.keep_last must be >= 1");
  if (resume.empty()) return InvalidArgument("checkpoint.resume must be auto, none or a step directory");
  return memory.Validate();
}

Status RestartConfig::Validate() const {
  if (max_restarts < 0 || max_restarts > 1000)
    return InvalidArgument("restart.max_restarts must be in [0, 1000], got " + std::to_string(max_restarts));
  auto in = [](const char* key, double v, double lo, bool lo_open, double hi) -> Status {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
    if (ok) return OkStatus();
    return InvalidArgument(std::string("restart.") + key + " must be a number in " + (lo_open ? "(" : "[") +
                           std::to_string(static_cast<int64_t>(lo)) + ", " + std::to_string(static_cast<int64_t>(hi)) +
                           "] seconds, got " + BoundedNumber(v));
  };
  RETURN_IF_ERROR(in("backoff_s", backoff_s, 0, false, 86400));
  RETURN_IF_ERROR(in("heartbeat_timeout_s", heartbeat_timeout_s, 0, true, 86400));
  RETURN_IF_ERROR(in("elastic_wait_s", elastic_wait_s, 0, true, 86400));
  RETURN_IF_ERROR(in("coordinator_loss_timeout_s", coordinator_loss_timeout_s, 0, true, 86400));
  if (min_world_size < 0)
    return InvalidArgument("restart.min_world_size must be >= 1 (or 0: parallel.world_size), got " +
                           std::to_string(min_world_size));
  // An elastic restart is a restart: with none allowed it can never happen.
  if (min_world_size > 0 && max_restarts == 0)
    return InvalidArgument("restart.min_world_size " + std::to_string(min_world_size) +
                           " with restart.max_restarts 0: a smaller world is only ever used by a restart; allow "
                           "restarts (max_restarts >= 1) or drop min_world_size");
  return in("hang_timeout_s", hang_timeout_s, 0, true, 30 * 86400);
}

Status JobConfig::Validate() const {
  // The one rule for names every entry point shares (shardctl launch,
  // standalone workers, the coordinator): a plain file name (not empty).
  for (size_t i = 0; i < name.size(); ++i) {  // echoed raw, a NUL would cut the message (and the name) short
    const auto ch = static_cast<unsigned char>(name[i]);
    if (ch < 0x20 || ch == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof(code), "0x%02X", ch);
      return InvalidArgument(std::string("name: control character ") + code + " at position " + std::to_string(i + 1) +
                             "; a job name is a plain file name (letters, digits, '.', '_', '-')");
    }
  }
  RETURN_IF_ERROR(CheckPlainName("name", name, kMaxJobNameLength));
  if (priority < kMinPriority || priority > kMaxPriority)
    return InvalidArgument("priority: " + std::to_string(priority) + " is outside " + std::to_string(kMinPriority) +
                           ".." + std::to_string(kMaxPriority));
  RETURN_IF_ERROR(model.Validate());
  RETURN_IF_ERROR(data.Validate());
  RETURN_IF_ERROR(train.Validate());
  RETURN_IF_ERROR(parallel.Validate());
  RETURN_IF_ERROR(CheckContextParallel(parallel.context_parallel, data.seq_len, parallel.world_size));
  if (parallel.context_parallel > 1) {  // what the trainer's split does not cover yet (docs/context-parallel.md)
    const std::string cp = "parallel.context_parallel " + std::to_string(parallel.context_parallel) + ": ";
    if (restart.min_world_size > 0 && restart.min_world_size < parallel.world_size)
      return Unimplemented(cp + "elastic restarts (restart.min_world_size) with context parallelism are not built "
                                "yet; leave restart.min_world_size unset");
  }
  RETURN_IF_ERROR(checkpoint.Validate());
  RETURN_IF_ERROR(restart.Validate());
  RETURN_IF_ERROR(health.Validate());
  RETURN_IF_ERROR(moe.Validate());
  RETURN_IF_ERROR(eval.Validate(data.sft()));
  RETURN_IF_ERROR(peft.Validate());
  RETURN_IF_ERROR(preference.Validate());
  if (preference.enabled()) {
    if (!data.sft())
      return InvalidArgument(std::string("preference: method ") + PreferenceMethodName(preference.method) +
                             " trains on pairs of replies from data.jsonl; data.tokens is a token stream with no "
                             "replies to compare");
    if (data.train_on != TrainOn::kAssistant)
      return InvalidArgument("data.train_on: all: a preference: job scores only the replies (train_on: assistant)");
    if (data.format != SftFormat::kAuto && data.format != SftFormat::kPreference)
      return InvalidArgument(std::string("data.format: ") + SftFormatName(data.format) +
                             ": a preference: job reads pairs (format auto or preference)");
    if (eval.exact_match)
      return InvalidArgument("eval.exact_match: a preference: job's eval scores held-out pairs (rewards, log-probs, "
                             "loss), not greedy answers; remove it");
  } else if (data.format == SftFormat::kPreference) {
    return InvalidArgument("data.format: preference: pairs train only under a preference: section (method dpo, ipo "
                           "or orpo)");
  }
  if (train.optim.state_dtype != DType::kF32) {
    // Held on the host beside the offloaded gradients; an on-device bf16
    // master and moments are not built.
    if (!parallel.offload_optimizer)
      return InvalidArgument(std::string("optim.state_dtype: ") + DTypeName(train.optim.state_dtype) +
                             " needs parallel.offload_optimizer: true (bf16 state is held in host memory; on the "
                             "device it is not built)");
    if (peft.enabled())
      return InvalidArgument("optim.state_dtype: only applies to full fine-tuning (a peft: job's frozen base has no "
                             "optimizer state)");
  }
  if (checkpoint.memory.enabled() && peft.enabled())
    return InvalidArgument("checkpoint.memory.every_steps: the memory tier holds full-training shards; a peft: job's "
                           "adapter checkpoints are small enough for checkpoint.every_steps alone");
  if (export_.merge && !peft.enabled())
    return InvalidArgument("export.merge: only applies to a peft: job (full fine-tuning exports the whole model anyway)");
  // The C ranks of a context-parallel group read the same rows: the data is split over world / C ranks.
  const int64_t per_step = train.micro_batch * (parallel.world_size / parallel.context_parallel);
  if (train.global_batch % per_step != 0)
    return InvalidArgument("train.global_batch " + std::to_string(train.global_batch) +
                           " must be a multiple of train.micro_batch x parallel.world_size" +
                           (parallel.context_parallel > 1 ? " / parallel.context_parallel" : "") + " = " +
                           std::to_string(per_step));
  if (resources.launcher == Launcher::kSlurm) RETURN_IF_ERROR(resources.slurm.Validate(parallel.world_size));
  if (resources.launcher == Launcher::kKubernetes) RETURN_IF_ERROR(resources.kubernetes.Validate(parallel.world_size));
  return CheckElasticConfig(*this);
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


Status MapModel(YamlMap& root, ModelSource* model) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("model"));
  RETURN_IF_ERROR(m.Get("preset", &model->preset));
  RETURN_IF_ERROR(m.Get("from_hf", &model->from_hf));
  return m.Finish();
}

Status MapData(YamlMap& root, const ModelSource& model, DataConfig* d) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("data"));
  RETURN_IF_ERROR(m.Get("tokens", &d->tokens));
  RETURN_IF_ERROR(m.Get("jsonl", &d->jsonl));
  RETURN_IF_ERROR(m.Get("seq_len", &d->seq_len));
  RETURN_IF_ERROR(m.Get("shuffle", &d->shuffle));
  RETURN_IF_ERROR(m.Get("prepared", &d->prepared));
  RETURN_IF_ERROR(m.Get("tokenizer", &d->tokenizer));
  RETURN_IF_ERROR(m.Get("template", &d->chat_template));
  if (!IsChatFormatSpec(d->chat_template))
    return InvalidArgument(m.Where("template") + ": '" + d->chat_template +
                           "' is not one of auto, hf, hf:NAME, plain, llama2, llama3, chatml");
  RETURN_IF_ERROR(GetEnum(m, "format", kSftFormatNames, &d->format));
  RETURN_IF_ERROR(m.Get("packing", &d->packing));
  RETURN_IF_ERROR(GetEnum(m, "train_on", kTrainOnNames, &d->train_on));
  RETURN_IF_ERROR(GetEnum(m, "bad_rows", kBadRowsNames, &d->bad_rows));
  RETURN_IF_ERROR(GetEnum(m, "overlong", kOverlongNames, &d->overlong));
  // The SFT keys mean nothing to a raw token file: refuse them rather than
  // silently train on something else than the user described.
  if (!d->tokens.empty() && d->jsonl.empty()) {
    for (const char* key : {"prepared", "tokenizer", "template", "format", "packing", "train_on", "bad_rows", "overlong"}) {
      if (m.Has(key))
        return InvalidArgument(m.Where(key) + ": only applies to SFT data (data.jsonl); data.tokens is a raw "
                               "uint32 token file, already tokenized");
    }
  }
  const bool tokenizer_given = m.Has("tokenizer");
  RETURN_IF_ERROR(m.Finish());
  // No data.tokenizer: the model's own (model.from_hf's folder), else byte.
  if (!tokenizer_given) RETURN_IF_ERROR(d->ResolveTokenizer(model.from_hf).WithContext(m.Where("tokenizer")));
  return OkStatus();
}

Status MapOptim(YamlMap& m, OptimConfig* o) {
  RETURN_IF_ERROR(m.Get("lr", &o->lr));
  RETURN_IF_ERROR(m.Get("min_lr_ratio", &o->min_lr_ratio));
  RETURN_IF_ERROR(m.Get("warmup_steps", &o->warmup_steps));
  RETURN_IF_ERROR(GetEnum(m, "schedule", kScheduleNames, &o->schedule));
  RETURN_IF_ERROR(m.Get("weight_decay", &o->weight_decay));
  RETURN_IF_ERROR(m.Get("decay_norms_and_embeddings", &o->decay_norms_and_embeddings));
  RETURN_IF_ERROR(m.Get("grad_clip", &o->grad_clip));
  RETURN_IF_ERROR(m.Get("adam_eps", &o->eps));
  std::vector<double> betas{o->beta1, o->beta2};
  RETURN_IF_ERROR(m.Get("adam_betas", &betas));
  if (betas.size() != 2) return InvalidArgument(m.Where("adam_betas") + ": expected two numbers [beta1, beta2]");
  o->beta1 = betas[0];
  o->beta2 = betas[1];
  return OkStatus();
}

Status MapTrain(YamlMap& root, TrainConfig* t) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("train"));
  RETURN_IF_ERROR(m.Get("steps", &t->steps));
  RETURN_IF_ERROR(m.Get("global_batch", &t->global_batch));
  RETURN_IF_ERROR(m.Get("micro_batch", &t->micro_batch));
  int64_t seed = static_cast<int64_t>(t->seed);
  RETURN_IF_ERROR(m.Get("seed", &seed));
  t->seed = static_cast<uint64_t>(seed);
  RETURN_IF_ERROR(GetEnum(m, "precision", kPrecisionNames, &t->precision));
  RETURN_IF_ERROR(m.Get("log_every", &t->log_every));
  RETURN_IF_ERROR(m.Get("loss_chunk_rows", &t->loss_chunk_rows));
  if (t->loss_chunk_rows < 0)
    return InvalidArgument(m.Where("loss_chunk_rows") + ": must be >= 0 (0 = auto), got " +
                           std::to_string(t->loss_chunk_rows));
  // A word or a number: read as text, parsed here so the error names the file.
  std::string loss_scale = t->loss_scale.ToString();
  RETURN_IF_ERROR(m.Get("loss_scale", &loss_scale));
  RETURN_IF_ERROR(m.Get("loss_scale_window", &t->loss_scale_window));
  auto ls = ParseLossScaleSetting(loss_scale);
  if (!ls.ok()) return InvalidArgument(m.Where("loss_scale") + ": " + ls.status().message());
  t->loss_scale = *ls;
  RETURN_IF_ERROR(MapOptim(m, &t->optim));
  return m.Finish();
}

// optim: the optimizer state's storage (the AdamW hyper-parameters stay in
// train:, where they always were).
Status MapOptimSection(YamlMap& root, OptimConfig* o) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("optim"));
  RETURN_IF_ERROR(GetEnum(m, "state_dtype", kStateDTypeNames, &o->state_dtype));
  // The AdamW hyper-parameters are train: keys; say where they go.
  const YAML::Node node = m.node();
  for (const char* key : {"lr", "min_lr_ratio", "warmup_steps", "schedule", "weight_decay", "decay_norms_and_embeddings",
                          "grad_clip", "adam_eps", "adam_betas"})
    if (node[key].IsDefined())
      return InvalidArgument(m.Where(key) + ": not an optim: key; the optimizer's hyper-parameters are train: keys "
                             "(train." + key + ")");
  return m.Finish();
}

Status MapParallel(YamlMap& root, ParallelConfig* p) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("parallel"));
  RETURN_IF_ERROR(GetEnum(m, "strategy", kShardStrategyNames, &p->strategy));
  RETURN_IF_ERROR(m.Get("world_size", &p->world_size));
  RETURN_IF_ERROR(m.Get("shard_group_size", &p->shard_group_size));
  RETURN_IF_ERROR(m.Get("activation_checkpointing", &p->activation_checkpointing));
  RETURN_IF_ERROR(m.Get("offload_optimizer", &p->offload_optimizer));
  RETURN_IF_ERROR(m.Get("comm_timeout_s", &p->comm_timeout_s));
  RETURN_IF_ERROR(GetEnum(m, "reduce_dtype", kFloatDTypeNames, &p->reduce_dtype));
  RETURN_IF_ERROR(m.Get("context_parallel", &p->context_parallel));
  return m.Finish();
}

Status MapCheckpoint(YamlMap& root, CheckpointConfig* c) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("checkpoint"));
  RETURN_IF_ERROR(m.Get("dir", &c->dir));
  RETURN_IF_ERROR(m.Get("every_steps", &c->every_steps));
  RETURN_IF_ERROR(m.Get("keep_last", &c->keep_last));
  RETURN_IF_ERROR(m.Get("async", &c->async));
  RETURN_IF_ERROR(m.Get("resume", &c->resume));
  RETURN_IF_ERROR(MapMemoryTierSection(m, &c->memory));
  return m.Finish();
}

Status MapSlurm(YamlMap& m, SlurmConfig* c) {
  ASSIGN_OR_RETURN(YamlMap s, m.Sub("slurm"));
  RETURN_IF_ERROR(s.Get("nodes", &c->nodes));
  RETURN_IF_ERROR(s.Get("tasks_per_node", &c->tasks_per_node));
  RETURN_IF_ERROR(s.Get("gpus_per_node", &c->gpus_per_node));
  RETURN_IF_ERROR(GetEnum(s, "gpu_request", kGpuRequestNames, &c->gpu_request));
  RETURN_IF_ERROR(s.Get("cpus_per_task", &c->cpus_per_task));
  RETURN_IF_ERROR(s.Get("partition", &c->partition));
  RETURN_IF_ERROR(s.Get("account", &c->account));
  RETURN_IF_ERROR(s.Get("qos", &c->qos));
  RETURN_IF_ERROR(s.Get("time", &c->time));
  RETURN_IF_ERROR(s.Get("mem", &c->mem));
  RETURN_IF_ERROR(s.Get("requeue", &c->requeue));
  RETURN_IF_ERROR(s.Get("signal_s", &c->signal_s));
  RETURN_IF_ERROR(s.Get("sbatch_args", &c->sbatch_args));
  RETURN_IF_ERROR(s.Get("setup", &c->setup));
  RETURN_IF_ERROR(s.Get("env", &c->env));
  RETURN_IF_ERROR(s.Get("poll_interval_s", &c->poll_interval_s));
  return s.Finish();
}

Status MapKubernetes(YamlMap& m, KubernetesConfig* c) {
  ASSIGN_OR_RETURN(YamlMap k, m.Sub("kubernetes"));
  RETURN_IF_ERROR(k.Get("namespace", &c->namespace_));
  RETURN_IF_ERROR(k.Get("image", &c->image));
  RETURN_IF_ERROR(GetEnum(k, "image_pull_policy", kImagePullPolicyNames, &c->image_pull_policy));
  RETURN_IF_ERROR(k.Get("nodes", &c->nodes));
  RETURN_IF_ERROR(k.Get("gpus_per_node", &c->gpus_per_node));
  RETURN_IF_ERROR(k.Get("procs_per_node", &c->procs_per_node));
  RETURN_IF_ERROR(k.Get("cpu", &c->cpu));
  RETURN_IF_ERROR(k.Get("memory", &c->memory));
  RETURN_IF_ERROR(k.Get("pvc", &c->pvc));
  RETURN_IF_ERROR(k.Get("mount_path", &c->mount_path));
  RETURN_IF_ERROR(k.Get("service_account", &c->service_account));
  RETURN_IF_ERROR(k.Get("coordinator", &c->coordinator));
  RETURN_IF_ERROR(k.Get("node_selector", &c->node_selector));
  RETURN_IF_ERROR(k.Get("labels", &c->labels));
  RETURN_IF_ERROR(k.Get("env", &c->env));
  RETURN_IF_ERROR(k.Get("active_deadline_s", &c->active_deadline_s));
  RETURN_IF_ERROR(k.Get("termination_grace_s", &c->termination_grace_s));
  RETURN_IF_ERROR(k.Get("poll_interval_s", &c->poll_interval_s));
  return k.Finish();
}

Status MapResources(YamlMap& root, ResourcesConfig* r) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("resources"));
  RETURN_IF_ERROR(GetEnum(m, "launcher", kLauncherNames, &r->launcher));
  std::string device = r->device.ToString();
  RETURN_IF_ERROR(m.Get("device", &device));
  auto dev = ParseDeviceSpec(device);
  if (!dev.ok()) return InvalidArgument(m.Where("device") + ": " + dev.status().message());
  r->device = *dev;
  RETURN_IF_ERROR(m.Get("cluster", &r->cluster));
  RETURN_IF_ERROR(MapSlurm(m, &r->slurm));
  RETURN_IF_ERROR(MapKubernetes(m, &r->kubernetes));
  // A cluster launcher asked for GPUs: auto means them, even where a
  // worker sees fewer GPUs than its host has ranks (one per task).
  if (r->device.is_auto() && ((r->launcher == Launcher::kSlurm && r->slurm.gpus_per_node > 0) ||
                              (r->launcher == Launcher::kKubernetes && r->kubernetes.gpus_per_node > 0)))
    r->device.kind = DeviceSpec::Kind::kCuda;
  return m.Finish();
}

Status MapRestart(YamlMap& root, RestartConfig* r) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("restart"));
  RETURN_IF_ERROR(m.Get("max_restarts", &r->max_restarts));
  RETURN_IF_ERROR(m.Get("backoff_s", &r->backoff_s));
  RETURN_IF_ERROR(m.Get("heartbeat_timeout_s", &r->heartbeat_timeout_s));
  RETURN_IF_ERROR(m.Get("hang_timeout_s", &r->hang_timeout_s));
  RETURN_IF_ERROR(m.Get("min_world_size", &r->min_world_size));
  RETURN_IF_ERROR(m.Get("elastic_wait_s", &r->elastic_wait_s));
  RETURN_IF_ERROR(m.Get("coordinator_loss_timeout_s", &r->coordinator_loss_timeout_s));
  return m.Finish();
}

Status MapExport(YamlMap& root, ExportConfig* e) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("export"));
  RETURN_IF_ERROR(m.Get("hf_dir", &e->hf_dir));
  RETURN_IF_ERROR(GetEnum(m, "dtype", kFloatDTypeNames, &e->dtype));
  RETURN_IF_ERROR(m.Get("merge", &e->merge));
  return m.Finish();
}

Status MapEval(YamlMap& root, EvalConfig* e) {
  ASSIGN_OR_RETURN(YamlMap m, root.Sub("eval"));
  RETURN_IF_ERROR(m.Get("data", &e->data));
  RETURN_IF_ERROR(m.Get("every_steps", &e->every_steps));
  RETURN_IF_ERROR(m.Get("max_samples", &e->max_samples));
  RETURN_IF_ERROR(m.Get("exact_match", &e->exact_match));
  return m.Finish();
}

Status MapJob(YamlMap& root, JobConfig* job) {
  RETURN_IF_ERROR(root.Get("name", &job->name));
  RETURN_IF_ERROR(root.Get("priority", &job->priority));
  RETURN_IF_ERROR(MapModel(root, &job->model));
  RETURN_IF_ERROR(MapData(root, job->model, &job->data));
  RETURN_IF_ERROR(MapTrain(root, &job->train));
  RETURN_IF_ERROR(MapOptimSection(root, &job->train.optim));
  RETURN_IF_ERROR(MapParallel(root, &job->parallel));
  RETURN_IF_ERROR(MapCheckpoint(root, &job->checkpoint));
  RETURN_IF_ERROR(MapResources(root, &job->resources));
  RETURN_IF_ERROR(MapRestart(root, &job->restart));
  RETURN_IF_ERROR(MapHealthSection(root, &job->health));
  RETURN_IF_ERROR(MapMoeSection(root, &job->moe));
  RETURN_IF_ERROR(MapExport(root, &job->export_));
  RETURN_IF_ERROR(MapEval(root, &job->eval));
  RETURN_IF_ERROR(MapPeftSection(root, &job->peft));
  RETURN_IF_ERROR(MapPreferenceSection(root, &job->preference));
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

std::string CheckpointJobDir(const JobConfig& job, const std::string& workdir) {
  std::filesystem::path dir(job.checkpoint.dir);
  if (!workdir.empty() && !dir.empty() && dir.is_relative()) dir = (std::filesystem::path(workdir) / dir).lexically_normal();
  return (dir / job.name).string();
}

namespace {
std::string Hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

std::string MemoryCheckpointJobDir(const JobConfig& job, const std::string& workdir, const std::string& job_id,
                                   int64_t submitted_ms) {
  const std::string root = job.checkpoint.memory.dir.empty() ? DefaultMemoryTierRoot() : job.checkpoint.memory.dir;
  std::error_code ec;
  std::filesystem::path disk = std::filesystem::absolute(CheckpointJobDir(job, workdir), ec);
  // weakly_canonical: a workdir reached through a link names the same folder.
  if (!ec) disk = std::filesystem::weakly_canonical(disk, ec);
  std::string key = disk.lexically_normal().string();
  // A coordinator's job: its id and submission time too, so a later job of
  // the same name and workdir (or another coordinator's job of the same id)
  // never shares the folder (issue 39 item 4).
  if (!job_id.empty()) key += "\n" + job_id + "\n" + std::to_string(submitted_ms);
  return (std::filesystem::path(root) /
          ((job_id.empty() ? job.name : job_id) + "-" + Hex16(XXH64(key.data(), key.size(), 0))))
      .string();
}

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
