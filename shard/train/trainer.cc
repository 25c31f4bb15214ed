#include "shard/train/trainer.h"


#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/resume_choice.h"
#include "shard/comm/timed_communicator.h"
#include "shard/common/fault.h"
#include "shard/common/file_util.h"
#include "shard/common/format_number.h"
#include "shard/common/logging.h"
#include "shard/data/prepare_sft.h"
#include "shard/data/sampler.h"
#include "shard/data/tokenizer_export.h"
#include "shard/model/hf_io.h"
#include "shard/model/init.h"
#include "shard/spec/optim_config.h"
#include "shard/train/base_weights_hash.h"
#include "shard/train/model_converter.h"
#include "shard/train/data_sources.h"
#include "shard/train/synthetic_batch_source.h"
#include "shard/train/tensorboard_writer.h"

namespace shard {
namespace {

// resources.device for this rank. auto: a GPU per rank when this host has one
// for every rank of a multi-process job (local launches put every rank here),
// else the CPU; cuda: rank r takes GPU r % (GPUs on this host).
std::string DeviceFor(const DeviceSpec& device, const DistContext& d) {
  if (device.is_cpu()) return "cpu";
  const int gpus = NumCudaDevices();
  if (device.is_auto() && !(gpus > 0 && d.world <= gpus && (d.world == 1 || d.comm_backend != "local"))) return "cpu";
  if (device.index >= 0) return device.ToString();
  return "cuda:" + std::to_string(gpus > 0 ? d.rank % gpus : 0);
}

}  // namespace

namespace {

// A MoE model's aux-loss coefficient (0 for a dense one). Preference
// objectives add no load-balancing loss (their pair rows carry no padding
// mask): a nonzero coefficient there is refused rather than ignored.
StatusOr<double> MoeAuxLossCoef(const JobConfig& job, const LlamaConfig& config) {
  const double coef = job.moe.AuxLossCoef(config);
  for (auto [key, v] : {std::pair<const char*, double>{"aux_loss_coef", coef}, {"z_loss_coef", job.moe.ZLossCoef(config)}})
    if (v != 0 && job.preference.enabled())
      return Unimplemented(std::string("moe.") + key + " " + BoundedNumber(v) +
                           ": the router losses are not applied under preference: " +
                           PreferenceMethodName(job.preference.method) + " (pair rows carry no padding mask yet); set " +
                           key + ": 0 (docs/moe.md)");
  return coef;
}

}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobConfig& job, const DistContext& dist) {
  if (dist.world < 1 || dist.rank < 0 || dist.rank >= dist.world)
    return InvalidArgument("rank " + std::to_string(dist.rank) + " is outside world size " + std::to_string(dist.world));
  if (dist.world != job.parallel.world_size)
    return InvalidArgument("this worker was started as one of " + std::to_string(dist.world) +
                           " ranks but the job's parallel.world_size is " + std::to_string(job.parallel.world_size));
  if (dist.world > 1 && !dist.store && dist.comm_backend != "local" && dist.comm_backend != "sim")
    return InvalidArgument("a multi-rank job needs a rendezvous store (e.g. --rendezvous file:DIR)");
  std::unique_ptr<Trainer> t(new Trainer(job, dist));
  RETURN_IF_ERROR(t->Init());
  ASSIGN_OR_RETURN(t->moe_aux_coef_, MoeAuxLossCoef(job, t->model_->config()));
  t->moe_z_coef_ = job.moe.ZLossCoef(t->model_->config());
  return t;
}

std::string Trainer::ResumeMemoryDir() const {
  // Never resume from a memory folder that is not the user's own (a link,
  // another user's, writable by others: owned_dir.h). A per-host tier's
  // steps commit on no host: only a plan hands one (the step named), so the
  // trainer's own "auto" (no plan) never meets such a folder.
  return MemoryDirToResumeFrom(memory_dir_, dist_.tiers.memory_depth);
}

Status Trainer::ChooseResume() {
  if (job_.checkpoint.memory.enabled() && dist_.tiers.memory)
    memory_dir_ = dist_.tiers.memory_dir.empty() ? MemoryCheckpointJobDir(job_) : dist_.tiers.memory_dir;
  // A peft: job's checkpoints hold only its adapters (lora_trainable.cc): its frozen
  // base is always loaded, so it never takes a full step here.
  if (job_.peft.enabled()) return OkStatus();
  // The attempt's plan names the step (or none): verified, never replaced
  // by another. Nothing handed (a library user, a test: the job file's
  // auto): chosen here by the same ChooseResumeStep the coordinator calls.
  if (ResumeSpec() == "auto") {
    ASSIGN_OR_RETURN(resume_, ChooseResumeStep("auto", CheckpointJobDir(job_), run_keys_, ResumeMemoryDir()));
  } else {
    ASSIGN_OR_RETURN(resume_, VerifyHandedStep(ResumeSpec(), run_keys_, ResumeMemoryDir(), dist_.tiers.this_run_only));
  }
  if (dist_.rank == 0)
    for (const std::string& e : resume_.events) LOG_WARN("resume: {}", e);
  return OkStatus();
}

namespace {

// model.from_hf's config: as the engine reads it, and its text as it is (kept
// for export: every checkpoint's manifest carries it, shard/spec/hf_config_export.h).
StatusOr<LlamaConfig> HfModelConfig(const std::string& from_hf, std::string* text) {
  ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromHfDir(from_hf));
  ASSIGN_OR_RETURN(*text, ReadFileToString((std::filesystem::path(from_hf) / "config.json").string()));
  return config;
}

}  // namespace

Status Trainer::Init() {
  LlamaConfig config;
  if (!job_.model.from_hf.empty()) {
    ASSIGN_OR_RETURN(config, HfModelConfig(job_.model.from_hf, &source_config_));
  } else {
    ASSIGN_OR_RETURN(config, LlamaPreset(job_.model.preset));
  }
  // The committed step to resume from (if any) is chosen first: a resumed run
  // overwrites every shard from the checkpoint, so it reads config.json only
  // and never opens, maps or reads the HF weights (an automatic restart of a
  // 70B job must not touch 140 GB of safetensors again).
  RETURN_IF_ERROR(ChooseResume());
  if (job_.data.seq_len > config.max_position_embeddings)
    return InvalidArgument("data.seq_len " + std::to_string(job_.data.seq_len) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings));

  // precision auto: TF32 for fp32 GEMMs on Ampere and later (DESIGN.md); fp32: strict fp32 products.
  BackendOptions bo;
  bo.allow_tf32 = job_.train.precision != Precision::kFp32;
  if (dist_.make_backend) {
    ASSIGN_OR_RETURN(backend_, dist_.make_backend());
  } else {
    ASSIGN_OR_RETURN(backend_, CreateBackend(DeviceFor(job_.resources.device, dist_), bo));
  }
  // HF weights stay memory-mapped: each rank reads only its own shard's
  // bytes (InitRuntime), never the whole model.
  std::optional<HfWeights> hf;
  if (!job_.model.from_hf.empty() && resume_.step_dir.empty() && backend_->holds_data()) {
    ASSIGN_OR_RETURN(HfWeights weights, OpenHfWeightsFor(job_.model.from_hf, config, ParamLayout::ForLlama(config)));
    hf.emplace(std::move(weights));
  }
  if (std::string(backend_->name()) == "cuda" && dist_.world > 1 && dist_.comm_backend == "local")
    return InvalidArgument("device " + job_.resources.device.ToString() +
                              ": ranks as threads (the local communicator) share host memory; use device: cpu");
  // precision auto, per device: bf16 on GPUs that have it, fp16 + the loss
  // scaler on older ones, fp32 on the CPU (the planner assumes the same).
  precision_ = ResolveAutoPrecision(job_.train.precision, std::string(backend_->name()) != "cpu",
                                    backend_->native_bf16());
  if (precision_ != job_.train.precision && dist_.rank == 0)
    LOG_INFO("train.precision auto: {} on this {} device", PrecisionName(precision_), backend_->name());
  auto lso = ResolveLossScale(job_.train.loss_scale, precision_ == Precision::kFp16, job_.train.loss_scale_window);
  if (!lso.ok()) return lso.status().WithContext("train.loss_scale");
  scaler_ = std::make_unique<LossScaler>(*lso);
  ModelOptions mo;
  mo.max_batch = job_.train.micro_batch * RowsPerItem(job_);
  // Context parallelism: the model holds seq_len / C rows of each sequence, at global positions.
  mo.max_seq = job_.data.seq_len / cp_size();
  mo.max_position = job_.data.seq_len;
  mo.activation_checkpointing = job_.parallel.activation_checkpointing;
  mo.loss_chunk_rows = job_.train.loss_chunk_rows;
  const PrecisionPlan precision = PlanPrecision(precision_, job_.train, job_.parallel);
  // bf16/fp16: GEMM and attention inputs in that type too (tensor cores), as
  // torch autocast and DeepSpeed's bf16 mode do; fp32 accumulation.
  mo.matmul_dtype = precision.param_dtype;
  // ...and the activations kept for backward held in it (autocast's bf16
  // activations); fp32 precision stays fp32 throughout.
  mo.activation_dtype = precision.param_dtype;
  RETURN_IF_ERROR(CheckContextParallelTraining(job_, config, *backend_));
  ASSIGN_OR_RETURN(model_, LlamaModel::Create(config, backend_.get(), mo));
  if (model_->loss_chunk_rows() < mo.max_batch * mo.max_seq)
    LOG_INFO("LM head and loss in chunks of {} rows: {:.1f} MiB of fp32 logits instead of {:.1f} MiB",
             model_->loss_chunk_rows(), model_->max_logits_rows() * config.vocab_size * 4 / 1048576.0,
             mo.max_batch * mo.max_seq * config.vocab_size * 4 / 1048576.0);
  RETURN_IF_ERROR(InitRuntime(hf ? &*hf : nullptr, precision));
  RETURN_IF_ERROR(InitTrainable());
  RETURN_IF_ERROR(job_.data.CheckTokenizerFitsModel(config.vocab_size));
  if (backend_->holds_data()) {
    RETURN_IF_ERROR(PrepareData());
    ASSIGN_OR_RETURN(data_, OpenBatchSource(job_, config.vocab_size));
    RETURN_IF_ERROR(PrepareEvalData());
  } else {
    data_ = SyntheticBatchSource(job_);  // the simulator: the job's shapes, no files
  }
  RETURN_IF_ERROR(PrepareObjective());  // with the starting weights: before Resume
  RETURN_IF_ERROR(Resume());

  const int64_t rows = job_.train.micro_batch * RowsPerItem(job_) * job_.data.seq_len;
  for (auto* h : {&h_tokens_, &h_targets_, &h_pos_, &h_seg_}) h->resize(rows);
  for (auto* d : {&d_tokens_, &d_targets_, &d_pos_, &d_seg_}) {
    ASSIGN_OR_RETURN(*d, DeviceBuffer::Create(backend_.get(), rows));
  }
  LOG_INFO("model {} ({:.2f}M parameters, {} layers, d={}), {}, backend {}",
           job_.model.preset.empty() ? job_.model.from_hf : job_.model.preset, config.NumParams() / 1e6,
           config.num_layers, config.hidden_size, data_->Describe(), backend_->name());
  LOG_INFO("optimizer state: {} — device: {:.1f} MiB parameter shards, {:.1f} MiB gradient shards, {:.1f} MiB "
           "AdamW moments; host: {:.1f} MiB",
           optimizer_->offloaded() ? std::string("offloaded (") + DTypeName(optimizer_->state_dtype()) +
                                         " master, m, v; fp32 gradients; in host memory)"
                                   : std::string("on the device"),
           optimizer_->param_shard_device_bytes() / 1048576.0, optimizer_->grad_shard_device_bytes() / 1048576.0,
           optimizer_->device_bytes() / 1048576.0, optimizer_->host_bytes() / 1048576.0);
  return OkStatus();
}

Status Trainer::PrepareData() {
  if (!job_.data.sft()) return OkStatus();
  const PrepareSftOptions po = SftPrepareOptions(job_);
  Status mine = OkStatus();
  if (dist_.rank == 0) mine = EnsurePrepared(po).status();
  // A barrier that also carries rank 0's outcome, so the other ranks fail at
  // once instead of waiting for files that will never come.
  double failed = mine.ok() ? 0.0 : 1.0;
  RETURN_IF_ERROR(runtime_->AllReduceSum(&failed, 1));
  if (!mine.ok()) return mine.WithContext("preparing data.jsonl " + po.input + " into " + po.out);
  if (failed != 0)
    return FailedPrecondition("rank 0 could not prepare data.jsonl " + po.input + " into " + po.out +
                              " (its log says why)");
  return OkStatus();
}

Status Trainer::InitRuntime(const HfWeights* hf, const PrecisionPlan& precision) {
  const ShardStrategy strategy = job_.parallel.strategy;
  ASSIGN_OR_RETURN(GroupShape shape, GroupShapeFor(strategy, dist_.world, job_.parallel.shard_group_size));
  FsdpOptions fo;
  fo.strategy = strategy;
  // LoRA: the base is frozen (no gradients, no optimizer state) — nothing to offload.
  const bool offload = job_.parallel.offload_optimizer && !job_.peft.enabled();
  fo.moments_on_device = !offload;
  fo.grads_on_device = !offload;
  if (!precision.warning.empty() && dist_.rank == 0) LOG_WARN("{}", precision.warning);
  ApplyPrecision(precision, &fo);
  // Offloaded, the fp32 master lives on the host: the device shard holds only
  // what the all-gathers send, in the compute dtype (2 B/param under bf16/fp16).
  if (offload) fo.param_shard_dtype = fo.param_dtype;
  // peft: the frozen base, and qlora's NF4 linear layers (model_converter.h).
  RETURN_IF_ERROR(ApplyConverters(ModelConvertersFor(job_), model_->layout(), &fo));
  fo.comm.timeout = std::chrono::milliseconds(static_cast<int64_t>(job_.parallel.comm_timeout_s * 1000));
  auto make_comm = [&](int sub_rank, int sub_world, const std::string& group) -> StatusOr<std::unique_ptr<Communicator>> {
    if (sub_world == 1) return std::unique_ptr<Communicator>();
    CommConfig cc;
    // Device buffers travel over NCCL: a GPU job's process communicator is nccl.
    cc.backend = std::string(backend_->name()) == "cuda" && dist_.comm_backend == "gloo" ? "nccl" : dist_.comm_backend;
    cc.rank = sub_rank;
    cc.world_size = sub_world;
    cc.store = dist_.store;
    cc.prefix = dist_.prefix + group + "/";
    cc.gloo_hostname = dist_.gloo_hostname;
    cc.timeout = fo.comm.timeout;
    // nccl orders each collective after the compute stream by event instead
    // of synchronising the device (null on the CPU; local/gloo ignore it).
    cc.device_stream = backend_->native_stream();
    auto c = CreateCommunicator(cc);
    if (!c.ok()) return c.status().WithContext("rank " + std::to_string(dist_.rank) + " joining group " + group);
    // Every collective this thread calls counts as waiting, not computing
    // (StepMetrics::compute_seconds), and goes to the flight recorder.
    return WithWaitClock(std::move(*c), dist_.flight_recorder, group);
  };
  const int S = shape.shard_size;
  shard_count_ = S;
  ASSIGN_OR_RETURN(auto shard_comm, make_comm(dist_.rank % S, S, "shard" + std::to_string(dist_.rank / S)));
  ASSIGN_OR_RETURN(auto rep_comm, make_comm(dist_.rank / S, shape.replicas, "rep" + std::to_string(dist_.rank % S)));
  if (cp_size() > 1) {  // the ranks that split each sequence (cp_group.h); FSDP stays over the whole world
    const int C = cp_size();
    ASSIGN_OR_RETURN(auto cp_comm, make_comm(dist_.rank % C, C, "cp" + std::to_string(dist_.rank / C)));
    cp_ = std::make_unique<CpGroup>(backend_.get(), std::move(cp_comm), fo.comm);
    model_->SetAttention(cp_->attention());
    // MoE: the aux and z losses are means over each micro-batch's whole rows; the group sums their counts.
    model_->SetMoeStatsSum([cp = cp_.get()](double* v, int64_t n) { return cp->AllReduceSum(v, n); });
    if (dist_.rank == 0)
      LOG_INFO("context parallelism: {} ranks per sequence ({} of its {} tokens each, head-tail chunks), {} data "
               "ranks", C, job_.data.seq_len / C, job_.data.seq_len, dist_.world / C);
  }
  const ParamLayout& layout = model_->layout();
  std::vector<int64_t> numels;
  for (const auto& u : layout.units) numels.push_back(u.numel);
  ASSIGN_OR_RETURN(runtime_, FsdpRuntime::Create(backend_.get(), numels, fo, std::move(shard_comm), std::move(rep_comm)));

  OptimStateOptions so;
  so.state_dtype = job_.train.optim.state_dtype;
  so.seed = job_.train.seed;
  ASSIGN_OR_RETURN(optimizer_, OptimizerState::Create(backend_.get(), runtime_.get(), offload, so));
  // A resumed run gets every shard from the checkpoint (Resume): no initial weights.
  if (resume_.step_dir.empty()) RETURN_IF_ERROR(LoadInitialWeights(hf));
  CheckpointRole role;
  role.rank = dist_.rank;
  role.writer = dist_.rank / S == 0;
  role.committer = dist_.rank == 0 && !dist_.report_checkpoint;
  role.report = dist_.report_checkpoint;
  role.memory_dir = memory_dir_;
  role.memory_depth = dist_.tiers.memory_depth;
  role.memory_skipped = dist_.memory_step_skipped;
  checkpointer_ = std::make_unique<Checkpointer>(job_, role, optimizer_.get(), runtime_.get(), layout);
  return OkStatus();
}

Status Trainer::LoadInitialWeights(const HfWeights* hf) {
  // Each rank fills only its own shard, one unit at a time through one
  // shard-sized buffer: from its byte ranges of the HF weights or from the
  // deterministic init, which does not depend on the world size.
  // The buffer comes from the backend (pinned on GPUs: the uploads run at
  // bus speed), sized once for the largest unit shard.
  const ParamLayout& layout = model_->layout();
  int64_t largest = 0;
  for (int u = 0; u < layout.num_units(); ++u) largest = std::max(largest, runtime_->layout(u).shard_numel);
  ASSIGN_OR_RETURN(HostBuffer host, HostBuffer::Create(backend_.get(), largest));
  if (!backend_->holds_data()) return OkStatus();  // the simulator: the buffer's bytes are all it needs
  // A peft: job's base, and a dpo/ipo full fine-tune's starting model (its
  // reference's key), are identified by their values (base_weights_hash.h),
  // not by their path: each rank hashes the shard it streams; one replica
  // counts each shard once.
  const bool hash_base = hf && (job_.peft.enabled() || job_.preference.needs_reference());
  const bool first_replica = dist_.rank / shard_count_ == 0;
  uint64_t base_hash = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const ShardLayout& sl = runtime_->layout(u);
    const int64_t begin = sl.begin(runtime_->shard_rank()), end = sl.end(runtime_->shard_rank());
    std::fill_n(host.data(), sl.shard_numel, 0.0f);  // the padding stays zero
    if (!hf) {
      InitUnitParams(layout.units[u], u, job_.train.seed, 0.02f, begin, end, host.data());
    } else {
      RETURN_IF_ERROR(ReadHfUnitRange(*hf, layout.units[u], begin, end, host.data())
                          .WithContext("model.from_hf " + job_.model.from_hf));
      const int64_t real_end = std::min(end, layout.units[u].numel);  // not the shard's padding
      if (hash_base && first_replica && real_end > begin)
        base_hash += WeightsSliceHash(u, begin, host.data(), real_end - begin);
    }
    if (runtime_->frozen()) {
      // LoRA/QLoRA: stored as the runtime keeps the frozen base (NF4 or the
      // compute dtype), converted once, here, per shard.
      RETURN_IF_ERROR(runtime_->WriteFrozenShard(u, host.data()));
    } else {
      optimizer_->WriteParams(u, host.data());  // the device shard, and the host master when offloaded
    }
  }
  if (hash_base) {
    std::array<double, 4> limbs = HashToLimbs(base_hash);
    RETURN_IF_ERROR(runtime_->AllReduceSum(limbs.data(), 4).WithContext("hashing the base's weights"));
    base_weights_hash_ = FoldHashLimbs(limbs);
  }
  return OkStatus();
}

Manifest Trainer::RunState() const {
  Manifest m;
  m.job = job_.name;
  m.step = step_;
  m.world = dist_.world;
  m.strategy = StrategyName(job_.parallel.strategy);
  m.shard_count = shard_count_;
  m.model_hash = model_->config().ShapeHash();
  m.model_config = model_->config().ToHfConfigJson();
  m.source_config = source_config_;
  for (const auto& u : model_->layout().units) m.units.emplace_back(u.name, u.numel);
  m.samples_seen = samples_seen_;
  m.seed = job_.train.seed;
  m.shuffle = job_.data.shuffle;
  m.global_batch = job_.train.global_batch;
  m.data_fingerprint = data_ ? data_->Fingerprint() : "";
  m.total_steps = job_.train.steps;
  m.tokens_seen = tokens_seen_;
  m.optimizer_steps = optimizer_steps_;
  m.loss_scale_mode = LossScaleModeName(scaler_->mode());
  m.loss_scale = scaler_->scale();
  m.loss_scale_good_steps = scaler_->good_steps();
  m.run_keys = run_keys_;
  m.run_fingerprint = RunFingerprint(run_keys_);
  m.reference = objective_ ? objective_->reference_model() : "";
  return m;
}

Status Trainer::InitTrainable() {
  TrainableParts p;
  p.job = &job_;
  p.rank = dist_.rank;
  p.shard_count = shard_count_;
  p.backend = backend_.get();
  p.model = model_.get();
  p.runtime = runtime_.get();
  p.optimizer = optimizer_.get();
  p.checkpointer = checkpointer_.get();
  p.run_keys = run_keys_;
  p.resume = resume_;
  p.resume_spec = ResumeSpec();
  p.base_weights_hash = base_weights_hash_;
  ASSIGN_OR_RETURN(trainable_, CreateTrainable(p));
  return OkStatus();
}

Status Trainer::PrepareObjective() {
  objective_ = dist_.make_objective ? dist_.make_objective(job_) : MakeObjective(job_);
  ObjectiveParts p;
  p.job = &job_;
  p.rank = dist_.rank;
  p.world = dist_.world;
  p.backend = backend_.get();
  p.model = model_.get();
  p.runtime = runtime_.get();
  p.lora = lora();
  p.data = data_.get();
  p.eval_data = eval_data_.get();
  p.eval_prefix = EvalPreparedPrefix(job_);
  p.resume_step_dir = resume_.step_dir;
  p.base_weights_hash = base_weights_hash_;
  p.precision = precision_;
  p.cp = cp_.get();
  return objective_->Prepare(p);
}

Status Trainer::Resume() {
  ResumeState rs;
  rs.data = data_.get();
  rs.scaler = scaler_.get();
  rs.counters = {step_, optimizer_steps_, samples_seen_, tokens_seen_};
  RETURN_IF_ERROR(trainable_->Resume(&rs));
  step_ = rs.counters.step;
  optimizer_steps_ = rs.counters.optimizer_steps;
  samples_seen_ = rs.counters.samples_seen;
  tokens_seen_ = rs.counters.tokens_seen;
  resumed_from_ = rs.resumed_from;
  resumed_tier_ = resumed_from_.empty() ? CheckpointTier::kDisk : resume_.tier;
  return OkStatus();
}

void Trainer::LoadRows(int64_t first_row, int64_t count) {
  data_->Fill(first_row, count, h_tokens_.data(), h_targets_.data(), h_pos_.data(), h_seg_.data());
  const int64_t rows = count * data_->rows_per_item(), seq = job_.data.seq_len;
  if (moe_aux_coef_ > 0 || moe_z_coef_ > 0) MarkRealRows(rows);  // over the whole rows, split with them
  // Context parallelism: this rank's chunks of the whole rows (targets were
  // shifted by the loader, before the split); segment ids stay whole.
  if (cp_) cp_->Split(rows, seq, {h_tokens_.data(), h_targets_.data(), h_pos_.data()});
  const size_t bytes = static_cast<size_t>(rows * seq) * sizeof(int32_t), local = bytes / cp_size();
  backend_->CopyToDevice(d_tokens_.data(), h_tokens_.data(), local);
  backend_->CopyToDevice(d_targets_.data(), h_targets_.data(), local);
  backend_->CopyToDevice(d_pos_.data(), h_pos_.data(), local);
  if (data_->segmented()) backend_->CopyToDevice(d_seg_.data(), h_seg_.data(), bytes);
}

Status Trainer::Run(const std::function<void(const StepMetrics&)>& on_step) {
  const auto& tc = job_.train;
  double window_seconds = 0;
  int64_t window_tokens = 0;
  std::unique_ptr<TensorBoardWriter> tb = dist_.rank == 0 && dist_.tensorboard ? OpenRunTensorBoard(checkpointer_->job_dir()) : nullptr;
  // Resumed at or past the end: nothing to train. Said as such (never as a
  // training result); an export still happens, so a run that died between its
  // last checkpoint and its export finishes it.
  nothing_trained_ = step_ >= tc.steps;
  if (nothing_trained_ && dist_.rank == 0)
    LOG_WARN("already complete: resumed {} at step {} >= train.steps {}; nothing to train", resumed_from_, step_,
             tc.steps);
  while (step_ < tc.steps) {
    MaybeWaitAtStepGate(step_ + 1);
    MaybeStallRank(dist_.rank, step_ + 1);
    ASSIGN_OR_RETURN(StepMetrics m, Step());
    if (EvalDue(m.step)) RETURN_IF_ERROR(objective_->Evaluate(&m));
    window_seconds += m.seconds;
    window_tokens += m.positions;
    if (on_step) on_step(m);
    if (tb) WriteStepScalars(tb, m);
    // A checkpoint's steps are on disk in the event file too, so a run killed
    // and resumed from it leaves no hole in TensorBoard's curves.
    if (tb && CheckpointDue(m.step)) {
      Status st = tb->Flush();
      if (!st.ok()) {
        LOG_WARN("TensorBoard events stop: {}", st.ToString());
        tb.reset();
      }
    }
    if (dist_.rank == 0 && (m.step % tc.log_every == 0 || m.step == tc.steps || m.step == 1)) {
      LOG_INFO("step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f} tokens/s {:.0f}{}{}{}", m.step, tc.steps, m.loss,
               m.lr, m.grad_norm, window_tokens / std::max(window_seconds, 1e-9),
               scaler_->enabled() ? fmt::format(" loss_scale {:g}", m.loss_scale) : std::string(),
               m.pairs > 0 ? fmt::format(" rewards/accuracies {:.3f} rewards/margins {:.4f}", m.rewards_accuracies,
                                         m.rewards_margins)
                           : std::string(),
               m.skipped ? " (skipped: inf/NaN)" : "");
      window_seconds = 0;
      window_tokens = 0;
    }
    if (stop_agreed_ && step_ < tc.steps) {
      RETURN_IF_ERROR(checkpointer_->Wait());
      stopped_ = true;
      if (dist_.rank == 0)
        LOG_WARN("stopped at step {} on request; checkpoint {}step_{} is written", step_,
                 trainable_->checkpoint_prefix(), step_);
      return OkStatus();
    }
  }
  RETURN_IF_ERROR(checkpointer_->Wait());
  if (dist_.rank == 0 && checkpointer_->memory_saves() > 0)
    LOG_INFO("memory tier: {} saves in {}, {:.1f} ms stalled per save", checkpointer_->memory_saves(), memory_dir_,
             1000 * checkpointer_->memory_stall_seconds() / checkpointer_->memory_saves());
  if (!job_.export_.hf_dir.empty()) {
    RETURN_IF_ERROR(ExportHf(job_.export_.hf_dir, job_.export_.dtype));
    // The tokenizer the data was made with goes along (a token-stream job's:
    // model.from_hf's), so the folder loads as it is, and generation stops at
    // the data's chat-template end of turn.
    if (dist_.rank == 0) {
      StatusOr<std::vector<std::string>> tok_files =
          ExportJobTokenizer(job_.data, job_.model.from_hf, model_->config().vocab_size, job_.export_.hf_dir);
      RETURN_IF_ERROR(tok_files.status().WithContext("export.hf_dir"));
      // The source's config.json (only the dtype changed) and a generation
      // config; a peft: adapter folder (no merge) has neither.
      if (!job_.peft.enabled() || job_.export_.merge)
        RETURN_IF_ERROR(WriteExportedConfigs(job_.export_.hf_dir, model_->config(), source_config_,
                                             job_.export_.dtype, *tok_files)
                            .status()
                            .WithContext("export.hf_dir"));
    }
    if (dist_.rank == 0)
      LOG_INFO("exported the model{} to {} ({})", nothing_trained_ ? " (the resumed checkpoint's weights, untrained)" : "",
               job_.export_.hf_dir, DTypeName(job_.export_.dtype));
  }
  return OkStatus();
}

// export.hf_dir: the HF model, or a peft: job's adapter folder (or, with
// export.merge, the model with the adapters merged in).
Status Trainer::ExportHf(const std::string& dir, DType dtype) { return trainable_->Export(dir, dtype); }

}  // namespace shard
