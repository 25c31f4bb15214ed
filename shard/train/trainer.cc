#include "shard/train/trainer.h"

#include <chrono>
#include <cmath>

#include "shard/common/logging.h"
#include "shard/model/hf_io.h"
#include "shard/optim/adamw.h"

namespace shard {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobConfig& job) {
  std::unique_ptr<Trainer> t(new Trainer(job));
  RETURN_IF_ERROR(t->Init());
  return t;
}

Status Trainer::Init() {
  if (job_.parallel.world_size != 1)
    return Unimplemented("parallel.world_size " + std::to_string(job_.parallel.world_size) +
                         ": multi-rank (FSDP) training is not built yet; use world_size: 1");
  if (job_.checkpoint.every_steps > 0)
    return Unimplemented("checkpoint.every_steps: checkpointing is not built yet; set it to 0");
  if (job_.parallel.offload_optimizer)
    return Unimplemented("parallel.offload_optimizer: optimizer offload comes with the CUDA backend");
  if (job_.train.precision == "bf16" || job_.train.precision == "fp16")
    return Unimplemented("train.precision " + job_.train.precision +
                         ": reduced precision comes with the CUDA backend; the CPU backend trains in fp32 "
                         "(use auto or fp32)");

  LlamaConfig config;
  std::vector<std::vector<float>> hf_units;
  if (!job_.model.from_hf.empty()) {
    ASSIGN_OR_RETURN(config, LlamaConfigFromHfDir(job_.model.from_hf));
    RETURN_IF_ERROR(LoadHfWeights(job_.model.from_hf, ParamLayout::ForLlama(config), &hf_units));
  } else {
    ASSIGN_OR_RETURN(config, LlamaPreset(job_.model.preset));
  }
  if (job_.data.seq_len > config.max_position_embeddings)
    return InvalidArgument("data.seq_len " + std::to_string(job_.data.seq_len) +
                           " exceeds the model's max_position_embeddings " +
                           std::to_string(config.max_position_embeddings));

  ASSIGN_OR_RETURN(backend_, CreateBackend(job_.resources.device));
  ModelOptions mo;
  mo.max_batch = job_.train.micro_batch;
  mo.max_seq = job_.data.seq_len;
  mo.activation_checkpointing = job_.parallel.activation_checkpointing;
  ASSIGN_OR_RETURN(model_, LlamaModel::Create(config, backend_.get(), mo));
  ASSIGN_OR_RETURN(params_, LocalParams::Create(backend_.get(), model_->layout(), /*with_grads=*/true));
  if (hf_units.empty()) {
    params_->InitRandom(job_.train.seed, 0.02f);
  } else {
    RETURN_IF_ERROR(params_->LoadUnits(hf_units));
  }
  for (const auto& u : model_->layout().units) {
    ASSIGN_OR_RETURN(DeviceBuffer m, DeviceBuffer::Create(backend_.get(), u.numel));
    ASSIGN_OR_RETURN(DeviceBuffer v, DeviceBuffer::Create(backend_.get(), u.numel));
    backend_->Fill(m.data(), m.size(), 0.0f);
    backend_->Fill(v.data(), v.size(), 0.0f);
    adam_m_.push_back(std::move(m));
    adam_v_.push_back(std::move(v));
  }

  ASSIGN_OR_RETURN(TokenWindows windows, TokenWindows::Open(job_.data.tokens, job_.data.seq_len, config.vocab_size));
  data_ = std::make_unique<TokenWindows>(std::move(windows));
  sampler_ = std::make_unique<Sampler>(data_->num_windows(), job_.data.shuffle, job_.train.seed);

  const int64_t rows = job_.train.micro_batch * job_.data.seq_len;
  h_tokens_.resize(rows);
  h_targets_.resize(rows);
  h_pos_.resize(rows);
  ASSIGN_OR_RETURN(d_tokens_, DeviceBuffer::Create(backend_.get(), rows));
  ASSIGN_OR_RETURN(d_targets_, DeviceBuffer::Create(backend_.get(), rows));
  ASSIGN_OR_RETURN(d_pos_, DeviceBuffer::Create(backend_.get(), rows));
  LOG_INFO("model {} ({:.2f}M parameters, {} layers, d={}), {} windows of {} tokens, backend {}",
           job_.model.preset.empty() ? job_.model.from_hf : job_.model.preset, config.NumParams() / 1e6,
           config.num_layers, config.hidden_size, data_->num_windows(), job_.data.seq_len, backend_->name());
  return OkStatus();
}

Status Trainer::LoadMicroBatch(int64_t first_pos, int64_t count) {
  const int64_t T = job_.data.seq_len;
  for (int64_t i = 0; i < count; ++i) {
    int64_t w = sampler_->At(first_pos + i);
    data_->Window(w, &h_tokens_[i * T], &h_targets_[i * T], &h_pos_[i * T]);
  }
  size_t bytes = static_cast<size_t>(count * T) * sizeof(int32_t);
  backend_->CopyToDevice(d_tokens_.data(), h_tokens_.data(), bytes);
  backend_->CopyToDevice(d_targets_.data(), h_targets_.data(), bytes);
  backend_->CopyToDevice(d_pos_.data(), h_pos_.data(), bytes);
  return OkStatus();
}

StatusOr<StepMetrics> Trainer::Step() {
  auto t0 = std::chrono::steady_clock::now();
  const auto& tc = job_.train;
  const int64_t T = job_.data.seq_len;
  const int64_t base = step_ * tc.global_batch;
  // Every window position is a target, so the global count is known up front;
  // the loss is normalised by it whatever the accumulation or world size.
  const int64_t targets = tc.global_batch * T;
  const float grad_scale = 1.0f / static_cast<float>(targets);

  params_->ZeroGrads();
  double loss_sum = 0;
  for (int64_t mb = 0; mb < tc.global_batch; mb += tc.micro_batch) {
    RETURN_IF_ERROR(LoadMicroBatch(base + mb, tc.micro_batch));
    DeviceBatch b;
    b.batch = tc.micro_batch;
    b.seq = T;
    b.tokens = d_tokens_.as_int();
    b.targets = d_targets_.as_int();
    b.positions = d_pos_.as_int();
    ASSIGN_OR_RETURN(double l, model_->ForwardBackward(b, *params_, grad_scale));
    loss_sum += l;
  }

  const ParamLayout& layout = model_->layout();
  double sq = 0;
  for (int u = 0; u < layout.num_units(); ++u) sq += backend_->SumSquares(params_->grads(u), layout.units[u].numel);
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || !std::isfinite(loss_sum))
    return Internal("step " + std::to_string(step_ + 1) + ": loss or gradient norm is not finite (loss sum " +
                    std::to_string(loss_sum) + ", grad norm " + std::to_string(norm) +
                    "); lower train.lr or enable train.grad_clip");
  float clip = 1.0f;
  if (tc.optim.grad_clip > 0 && norm > tc.optim.grad_clip) clip = static_cast<float>(tc.optim.grad_clip / (norm + 1e-6));
  const double lr = LearningRate(tc.optim, step_, tc.steps);
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto& spec = layout.units[u];
    auto ranges = DecayRanges(spec, 0, spec.numel, tc.optim.decay_norms_and_embeddings);
    AdamWSlice(backend_.get(), ranges, tc.optim, static_cast<float>(lr), step_ + 1, clip, params_->params(u),
               params_->grads(u), adam_m_[u].data(), adam_v_[u].data());
  }
  backend_->Synchronize();
  ++step_;
  StepMetrics m;
  m.step = step_;
  m.loss = loss_sum / static_cast<double>(targets);
  m.lr = lr;
  m.grad_norm = norm;
  m.tokens = targets;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

Status Trainer::Run(const std::function<void(const StepMetrics&)>& on_step) {
  const auto& tc = job_.train;
  double window_seconds = 0;
  int64_t window_tokens = 0;
  while (step_ < tc.steps) {
    ASSIGN_OR_RETURN(StepMetrics m, Step());
    window_seconds += m.seconds;
    window_tokens += tc.global_batch * job_.data.seq_len;
    if (on_step) on_step(m);
    if (m.step % tc.log_every == 0 || m.step == tc.steps || m.step == 1) {
      LOG_INFO("step {}/{} loss {:.4f} lr {:.3e} grad_norm {:.3f} tokens/s {:.0f}", m.step, tc.steps, m.loss, m.lr,
               m.grad_norm, window_tokens / std::max(window_seconds, 1e-9));
      window_seconds = 0;
      window_tokens = 0;
    }
  }
  if (!job_.export_.hf_dir.empty()) {
    ASSIGN_OR_RETURN(DType dt, ParseDType(job_.export_.dtype));
    RETURN_IF_ERROR(ExportHf(job_.export_.hf_dir, dt));
    LOG_INFO("exported the model to {} ({})", job_.export_.hf_dir, job_.export_.dtype);
  }
  return OkStatus();
}

Status Trainer::ExportHf(const std::string& dir, DType dtype) {
  return shard::ExportHf(
      dir, model_->config(), model_->layout(),
      [&](int u, std::vector<float>* buf) {
        params_->CopyUnitToHost(u, buf);
        return OkStatus();
      },
      dtype);
}

}  // namespace shard
