#include "shard/plan/planner.h"

#include "shard/plan/adapter_memory.h"
#include "shard/plan/memory_tier_cost.h"
#include "shard/spec/context_parallel.h"
#include "shard/spec/lora_layout.h"
#include "shard/spec/precision.h"
#include "shard/common/format_number.h"

#include <fstream>

namespace shard::plan {
namespace {

std::string Fmt(const char* f, double v) { return FormatNumber(f, v); }

// Reasons a workload cannot run on a cluster at all (memory aside).
std::vector<std::string> RunProblems(const Workload& w, const ClusterSpec& c) {
  std::vector<std::string> r;
  auto shape = GroupShapeFor(w.strategy, std::max(1, w.world), w.shard_group_size);
  if (!shape.ok()) r.push_back(shape.status().message());
  if (Status cp = CheckContextParallel(w.context_parallel, w.seq_len, std::max(1, w.world)); !cp.ok())
    r.push_back(cp.message());
  if (w.seq_len > w.model.max_position_embeddings)
    r.push_back("data.seq_len " + std::to_string(w.seq_len) + " exceeds the model's max_position_embeddings " +
                std::to_string(w.model.max_position_embeddings));
  if (w.cpu_engine) {
    // bf16/fp16 run on the CPU engine as storage and wire format (fp32 math on
    // the rounded weights), so every precision can run there.
    // The optimizer offload runs on the CPU backend too (bitwise the
    // non-offloaded run; optim.state_dtype: bf16 needs it); parameter offload
    // is not built.
    if (w.offload.params) r.push_back("parameter offload is not built");
    return r;
  }
  if (w.world > c.total_gpus())
    r.push_back("parallel.world_size " + std::to_string(w.world) + " needs " + std::to_string(w.world) +
                " GPUs; cluster " + c.name + " has " + std::to_string(c.total_gpus()));
  if (w.compute == DType::kBF16 && !c.gpu.bf16)
    r.push_back(c.gpu.name + " has no bf16 (compute capability " + Fmt("%.1f", c.gpu.compute_capability) +
                "): use train.precision fp16 (dynamic loss scaling) or auto");
  if (w.compute == DType::kF16 && c.gpu.tflops_fp16 <= 0) r.push_back(c.gpu.name + " has no fp16 tensor cores");
  return r;
}

// peft: as the trainer builds it (Trainer::InitRuntime, CreateLoraTrainable): adapters
// on the targeted linears, the base frozen and held in the compute dtype's
// shards, nothing offloaded; QLoRA's block linears in NF4 at the job's block
// size.
void MapPeft(const JobConfig& job, JobWorkload* out) {
  const PeftConfig& p = job.peft;
  if (!p.enabled()) return;
  Workload& w = out->workload;
  w.method = p.method == PeftMethod::kQlora ? Method::kQlora : Method::kLora;
  w.lora_rank = p.r;
  // The targets the model has (all-linear: the router on a sparse model,
  // qwen2_moe's shared_expert_gate; neither on a dense one), as the trainer's layout.
  w.lora_targets = LoraLayout::For(w.model, p).targets;
  w.lora_dropout = p.dropout;
  if (w.method == Method::kQlora) w.qlora_bits = Nf4Bits(p.block_size, p.double_quant);
  if (w.offload.optimizer)
    out->notes.push_back("parallel.offload_optimizer: a peft: job's base has no optimizer state and its adapters' "
                         "is small; nothing is offloaded");
  w.offload = {};
  w.async_checkpoint = false;  // a LoRA checkpoint is the adapters and their moments, written from host copies
  if (w.method == Method::kQlora && w.cpu_engine)
    out->notes.push_back("peft.method qlora on the CPU engine: priced as LoRA's fp32 base, an upper bound (the NF4 "
                         "records hold " + Fmt("%.3f", w.qlora_bits) + " bits per block-linear weight)");
}

// preference: as the trainer runs it (docs/preference.md): each item a pair
// of rows, so the step's memory and time are those of 2x the rows; dpo/ipo
// first score the training pairs once (the reference pass), counted here
// from data.jsonl's rows (an upper bound: bad and dropped rows are not
// trained).
void MapPreference(const JobConfig& job, JobWorkload* out) {
  if (!job.preference.enabled()) return;
  Workload& w = out->workload;
  w.rows_per_item = 2;
  w.micro_batch *= 2;
  w.global_batch *= 2;
  if (!job.preference.needs_reference()) return;
  w.reference_pairs = 0;
  std::ifstream f(job.data.jsonl);
  if (!f) {
    out->notes.push_back("data.jsonl " + job.data.jsonl + " is not readable here: the reference pass is priced per "
                         "pair, not for the job's pairs");
    return;
  }
  std::string line;
  while (std::getline(f, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++w.reference_pairs;
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kFits: return "fits";
    case Verdict::kTight: return "fits (tight)";
    case Verdict::kDoesNotFit: return "does not fit";
    case Verdict::kCannotRun: return "cannot run";
  }
  return "?";
}

double Plan::device_capacity_bytes() const {
  if (cluster.cpu_only)
    return cluster.host.ram_gib * (1 - kHostReserveFraction) * 1073741824.0 / std::max(1, memory.ranks_per_node);
  return cluster.gpu.memory_gib * 1073741824.0;
}

double Plan::host_capacity_bytes() const { return cluster.host.ram_gib * (1 - kHostReserveFraction) * 1073741824.0; }

StatusOr<JobWorkload> WorkloadFromJob(const JobConfig& job, const ClusterSpec& cluster) {
  JobWorkload out;
  Workload& w = out.workload;
  if (!job.model.preset.empty()) {
    ASSIGN_OR_RETURN(w.model, LlamaPreset(job.model.preset));
    w.model_name = job.model.preset;
  } else if (!job.model.from_hf.empty()) {
    // config.json only: the weights are not read to plan.
    ASSIGN_OR_RETURN(w.model, LlamaConfigFromHfDir(job.model.from_hf));
    w.model_name = job.model.from_hf;
    w.from_hf = true;
  } else {
    return InvalidArgument("model: set model.preset or model.from_hf");
  }
  RETURN_IF_ERROR(w.model.Validate().WithContext("model"));
  RETURN_IF_ERROR(w.model.CheckSequenceLength(job.data.seq_len, "data.seq_len"));
  w.strategy = job.parallel.strategy;
  w.cpu_engine = cluster.cpu_only;
  w.fp32_transients = !w.cpu_engine;  // shardd's GPU runtime as built (Workload::fp32_transients)
  w.world = job.parallel.world_size;
  w.shard_group_size = job.parallel.shard_group_size;
  w.activation_checkpointing = job.parallel.activation_checkpointing;
  w.offload.optimizer = job.parallel.offload_optimizer;
  w.optimizer_state = job.train.optim.state_dtype;  // bf16: held on the host (offloaded) only
  w.micro_batch = job.train.micro_batch;
  w.loss_chunk_rows = job.train.loss_chunk_rows;
  w.seq_len = job.data.seq_len;
  w.context_parallel = job.parallel.context_parallel;
  w.global_batch = job.train.global_batch;
  // Memory-tier saves go through the same snapshot as disk saves (Checkpointer::Save).
  w.async_checkpoint = (job.checkpoint.every_steps > 0 || job.checkpoint.memory.enabled()) && job.checkpoint.async;
  w.checkpoint_keep_last = job.checkpoint.every_steps > 0 ? job.checkpoint.keep_last : 0;
  w.memory_tier_keep_last = job.checkpoint.memory.enabled() ? job.checkpoint.memory.keep_last : 0;
  w.memory_tier_replicas = job.checkpoint.memory.replicas;
  RETURN_IF_ERROR(CheckLoraTargets(out.workload.model, job.peft));
  MapPeft(job, &out);
  MapPreference(job, &out);

  // The engine's rule (ResolveAutoPrecision), for the hardware planned for.
  const Precision asked = job.train.precision;
  const Precision p = ResolveAutoPrecision(asked, !w.cpu_engine, !w.cpu_engine && cluster.gpu.bf16);
  w.compute = PrecisionDType(p);
  w.reduce = PlanPrecision(p, job.train, job.parallel).reduce_dtype;
  w.tf32 = asked != Precision::kFp32;  // Trainer: BackendOptions::allow_tf32
  if (w.cpu_engine) {
    w.fp32_master = true;
  } else if (asked == Precision::kAuto) {
    out.notes.push_back(std::string("train.precision auto: ") +
                        (p == Precision::kBf16 ? (job.peft.enabled() ? std::string("bf16 compute, fp32 adapters")
                                                                     : std::string("bf16 compute with ") +
                                                                           DTypeName(w.optimizer_state) + " master weights")
                                               : "fp16 compute with dynamic loss scaling (no bf16 on " + cluster.gpu.name + ")"));
  } else {
    if (w.compute == DType::kF16) out.notes.push_back("fp16 compute: dynamic loss scaling skips steps with inf/nan gradients");
    if (w.compute == DType::kF32) out.notes.push_back("fp32 compute: GEMMs run in TF32 where the GPU has it");
  }
  if (!w.cpu_engine && w.world < cluster.total_gpus())
    out.notes.push_back("uses " + std::to_string(w.world) + " of the cluster's " + std::to_string(cluster.total_gpus()) +
                        " GPUs");
  if (w.cpu_engine && w.world > cluster.host.cpu_cores)
    out.notes.push_back(std::to_string(w.world) + " CPU ranks share " + std::to_string(cluster.host.cpu_cores) + " cores");
  return out;
}

StatusOr<ClusterSpec> ClusterForJob(const JobConfig& job, const HardwareCatalog& catalog, const std::string& name,
                                    const ClusterSpec* probed) {
  const DeviceSpec& device = job.resources.device;
  if (name.empty() && probed && !device.is_cpu()) return *probed;
  if (!name.empty()) {
    if (device.is_cpu())
      return InvalidArgument("resources.device is cpu, so the job runs on this host's CPU: drop --cluster, or plan "
                             "it for GPUs with --set resources.device=cuda");
    return catalog.Cluster(name);
  }
  if (device.is_cpu() || device.is_auto()) return LocalCpuCluster(catalog.cpu, job.parallel.world_size);
  std::string known;
  for (const auto& n : catalog.ClusterNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument("resources.device is " + device.ToString() + ": name the GPUs to plan for with --cluster NAME (" +
                         known + ")");
}

Plan PlanWorkload(const Workload& w, const ClusterSpec& cluster) {
  Plan p;
  p.workload = w;
  p.cluster = cluster;
  p.memory = EstimateMemory(w, cluster);
  p.time = EstimateStepTime(w, cluster);
  p.checkpoint = EstimateCheckpoint(w, cluster);
  if (w.reference_pairs >= 0) p.reference = PriceReferencePass(w, p.time, w.reference_pairs);
  const std::vector<std::string> run = RunProblems(w, cluster);
  p.reasons = run;

  const double dev_cap = p.device_capacity_bytes(), host_cap = p.host_capacity_bytes();
  const double dev = static_cast<double>(p.memory.device_total), host = static_cast<double>(p.memory.host_total);
  bool over = false;
  if (cluster.cpu_only) {
    if (host > host_cap) {
      over = true;
      p.reasons.push_back("the CPU engine needs " + FormatBytes(p.memory.device_total) + " per rank, " +
                          FormatBytes(p.memory.host_total) + " for " + std::to_string(p.memory.ranks_per_node) +
                          " ranks: more than the " + FormatBytes(static_cast<int64_t>(host_cap)) +
                          " usable of this host's " + Fmt("%.0f", cluster.host.ram_gib) + " GiB");
    }
  } else {
    if (dev > dev_cap) {
      over = true;
      p.reasons.push_back("per-GPU peak " + FormatBytes(p.memory.device_total) + " exceeds the " +
                          Fmt("%.0f", cluster.gpu.memory_gib) + " GiB of one " + cluster.gpu.name);
    }
    if (host > host_cap) {
      over = true;
      p.reasons.push_back("host memory " + FormatBytes(p.memory.host_total) + " per node exceeds the " +
                          FormatBytes(static_cast<int64_t>(host_cap)) + " usable (" +
                          Fmt("%.0f", cluster.host.ram_gib) + " GiB less 10% for the OS and page cache)");
    }
  }
  if (!run.empty()) {
    p.verdict = Verdict::kCannotRun;
  } else if (over) {
    p.verdict = Verdict::kDoesNotFit;
  } else if (!cluster.cpu_only && dev > 0.9 * dev_cap) {
    p.verdict = Verdict::kTight;
    p.notes.push_back("per-GPU peak is above 90% of device memory: fragmentation or a longer sample may not fit");
  } else {
    p.verdict = Verdict::kFits;
  }
  return p;
}

StatusOr<Plan> PlanJob(const JobConfig& job, const HardwareCatalog& catalog, const std::string& cluster_name,
                       const ClusterSpec* probed) {
  ASSIGN_OR_RETURN(ClusterSpec cluster, ClusterForJob(job, catalog, cluster_name, probed));
  ASSIGN_OR_RETURN(JobWorkload jw, WorkloadFromJob(job, cluster));
  Plan p = PlanWorkload(jw.workload, cluster);
  p.job_file = job.source;
  p.notes.insert(p.notes.begin(), jw.notes.begin(), jw.notes.end());
  // Planned for this host's local launcher: the tier's folder is here, so its
  // free space is known (tmpfs is sized apart from the RAM counted above).
  if (cluster_name.empty() && job.resources.launcher == Launcher::kLocal && p.memory.memory_tier_bytes > 0) {
    const std::string root = job.checkpoint.memory.dir.empty() ? DefaultMemoryTierRoot() : job.checkpoint.memory.dir;
    const size_t had = p.reasons.size();
    JudgeMemoryTierSpace(p.memory.memory_tier_bytes, p.memory.memory_tier_how, root, FreeBytesAt(root), &p.reasons,
                         &p.notes);
    if (p.reasons.size() > had && p.verdict != Verdict::kCannotRun) p.verdict = Verdict::kDoesNotFit;
  }
  if (p.workload.model.is_moe() && !p.workload.cpu_engine)
    p.notes.push_back("mixture of experts on CUDA: routing kernels plus one cuBLASLt GEMM per active expert over its "
                      "rows; tested against the CPU reference, not yet measured on a GPU (docs/moe.md)");
  if (cluster.cpu_only && cluster_name.empty() && job.resources.device.is_auto())
    p.notes.push_back("resources.device auto: planned for this host's CPU engine; pass --cluster NAME to plan for GPUs");
  if (!cluster.cpu_only && !p.workload.cpu_engine) {
    const std::string dt = DTypeName(p.workload.compute);
    const bool peft = p.workload.method != Method::kFull;
    std::string note = "planned for shardd's GPU runtime as built (" +
                       (peft ? std::string("the frozen base held as ") + (p.workload.method == Method::kQlora ? "NF4 block linears + " : "") +
                                   DTypeName(p.workload.base_dtype()) + " shards, fp32 adapters and their AdamW state, "
                             : std::string(DTypeName(p.workload.optimizer_state)) + " master weights and AdamW state, ") +
                       dt + " gathers, compute copies, GEMM inputs and kept activations, fp32 backward scratch and unsharded "
                            "gradients, NCCL)";
    if (p.workload.fp32_transients && p.workload.compute != DType::kF32) {
      Workload design = p.workload;
      design.fp32_transients = false;
      const int64_t saved = p.memory.device_total - EstimateMemory(design, cluster).device_total;
      if (saved > 0) note += "; keeping those in " + dt + " too would save " + FormatBytes(saved) + " per GPU";
    }
    p.notes.push_back(note);
  }
  p.recommendations = Recommend(p, catalog);
  return p;
}

}  // namespace shard::plan
