#include "shard/train/lora_adapters.h"

namespace shard {

StatusOr<std::unique_ptr<LoraAdapters>> LoraAdapters::Create(Backend* backend, const LlamaConfig& config,
                                                             const PeftConfig& peft, uint64_t seed) {
  RETURN_IF_ERROR(peft.Validate());
  RETURN_IF_ERROR(CheckLoraTargets(config, peft));
  std::unique_ptr<LoraAdapters> a(new LoraAdapters(backend));
  LoraBinding& b = a->binding_;
  b.layout = LoraLayout::For(config, peft);
  b.scale = static_cast<float>(peft.scale());
  b.dropout = static_cast<float>(peft.dropout);
  const int64_t n = b.layout.total_numel(), per = b.layout.layer_numel;
  for (DeviceBuffer* buf : {&a->params_, &a->grads_, &a->m_, &a->v_}) {
    ASSIGN_OR_RETURN(*buf, DeviceBuffer::Create(backend, n));
    backend->Fill(buf->data(), n, 0.0f);
  }
  std::vector<float> host(static_cast<size_t>(per));
  for (int l = 0; l < b.layout.num_layers; ++l) {
    InitLoraLayer(b.layout, peft.init, seed, l, host.data());
    a->WriteLayer(l, host.data());
    b.params.push_back(a->params_.data() + l * per);
    b.grads.push_back(a->grads_.data() + l * per);
  }
  return a;
}

void LoraAdapters::ZeroGrads() { backend_->Fill(grads_.data(), numel(), 0.0f); }

Status LoraAdapters::ReduceGrads(FsdpRuntime& runtime) {
  return runtime.AllReduceSumFloats(grads_.data(), numel()).WithContext("LoRA adapter gradient all-reduce");
}

double LoraAdapters::GradNormSquared() { return backend_->SumSquares(grads_.data(), numel()); }

void LoraAdapters::Step(const OptimConfig& c, float lr, int64_t step, float grad_scale) {
  AdamWArgs a;
  a.lr = lr;
  a.beta1 = static_cast<float>(c.beta1);
  a.beta2 = static_cast<float>(c.beta2);
  a.eps = static_cast<float>(c.eps);
  a.weight_decay = static_cast<float>(c.weight_decay);
  a.step = step;
  a.grad_scale = grad_scale;
  backend_->AdamW(params_.data(), grads_.data(), m_.data(), v_.data(), numel(), a);
}

void LoraAdapters::ReadLayer(int l, float* host) const {
  const int64_t per = binding_.layout.layer_numel;
  backend_->CopyToHost(host, params_.data() + l * per, static_cast<size_t>(per) * sizeof(float));
}

void LoraAdapters::WriteLayer(int l, const float* host) {
  const int64_t per = binding_.layout.layer_numel;
  backend_->CopyToDevice(params_.data() + l * per, host, static_cast<size_t>(per) * sizeof(float));
}

void LoraAdapters::ReadState(float* params, float* m, float* v) const {
  const size_t bytes = static_cast<size_t>(numel()) * sizeof(float);
  backend_->CopyToHost(params, params_.data(), bytes);
  backend_->CopyToHost(m, m_.data(), bytes);
  backend_->CopyToHost(v, v_.data(), bytes);
}

void LoraAdapters::WriteState(const float* params, const float* m, const float* v) {
  const size_t bytes = static_cast<size_t>(numel()) * sizeof(float);
  backend_->CopyToDevice(params_.data(), params, bytes);
  backend_->CopyToDevice(m_.data(), m, bytes);
  backend_->CopyToDevice(v_.data(), v, bytes);
}

}  // namespace shard
