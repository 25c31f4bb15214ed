// LlamaModel's adapter hooks (peft:): binding the LoRA/QLoRA adapters and
// applying them beside each targeted linear, dense and per expert.
#include <string>

#include "shard/model/llama_model.h"
#include "shard/model/moe_mlp.h"

namespace shard {

Status LlamaModel::SetLora(const LoraBinding* lora) {
  lora_ = nullptr;
  if (!lora) return OkStatus();
  const LoraLayout& l = lora->layout;
  for (int i = 0; i < config_.num_layers; ++i)
    if (l.sparse_layer(i) != config_.sparse_layer(i))
      return InvalidArgument("model: LoRA binding's layout takes layer " + std::to_string(i) + " as " +
                             (l.sparse_layer(i) ? "sparse" : "dense") + ", the model does not");
  if (l.num_layers != config_.num_layers || static_cast<int>(lora->params.size()) != config_.num_layers ||
      static_cast<int>(lora->grads.size()) != config_.num_layers)
    return InvalidArgument("model: LoRA binding has " + std::to_string(l.num_layers) + " layers (" +
                           std::to_string(lora->params.size()) + " buffers), the model " +
                           std::to_string(config_.num_layers));
  if (l.r < 1 || (l.tensors.empty() && l.experts.empty() && l.moe_tensors.empty()))
    return InvalidArgument("model: LoRA binding without adapters");
  for (const LoraTensor& t : l.tensors) {
    int64_t in = 0, out = 0;
    LoraTargetDims(config_, t.target, &in, &out);
    if (t.in != in || t.out != out)
      return InvalidArgument(std::string("model: LoRA adapter ") + LoraTargetName(t.target) + " is " +
                             std::to_string(t.out) + "x" + std::to_string(t.in) + ", the model's linear " +
                             std::to_string(out) + "x" + std::to_string(in));
  }
  if (!(lora->dropout >= 0 && lora->dropout < 1)) return InvalidArgument("model: LoRA dropout must be in [0, 1)");
  ASSIGN_OR_RETURN(lora_scratch_, LoraScratch::Create(backend_, l, max_rows_, lora->dropout > 0));
  lora_t_.clear();
  const int sets = options_.activation_checkpointing ? 1 : config_.num_layers;
  for (int i = 0; i < sets * static_cast<int>(l.tensors.size()); ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer t, DeviceBuffer::Create(backend_, max_rows_ * l.r));
    lora_t_.push_back(std::move(t));
  }
  if (frozen_norm_dw_.size() < config_.hidden_size) {
    ASSIGN_OR_RETURN(frozen_norm_dw_, DeviceBuffer::Create(backend_, config_.hidden_size));
  }
  lora_ = lora;
  return OkStatus();
}

bool LlamaModel::LoraCallFor(int layer, LoraTarget target, LoraCall* c) const {
  if (!lora_) return false;
  const int i = lora_->layout.Find(target);
  if (i < 0) return false;
  c->tensor = &lora_->layout.tensors[i];
  c->r = lora_->layout.r;
  c->adapter = lora_->params[layer];
  c->adapter_grad = lora_->grads[layer];
  c->scale = lora_->scale;
  c->dropout = training_ ? lora_->dropout : 0.0f;
  c->seed = LoraDropoutSeed(lora_->dropout_seed, layer, target);
  c->compute = options_.matmul_dtype;
  const int set = options_.activation_checkpointing ? 0 : layer;
  c->saved_t = lora_t_[set * lora_->layout.tensors.size() + i].data();
  return true;
}

bool LlamaModel::MoeLoraFor(int layer, MoeLora* m) {
  if (!lora_ || (lora_->layout.experts.empty() && lora_->layout.moe_tensors.empty())) return false;
  *m = MoeLora{&lora_->layout, lora_->params[layer], lora_->grads[layer], lora_->scale,
               training_ ? lora_->dropout : 0.0f, lora_->dropout_seed, &lora_scratch_};
  return true;
}

void LlamaModel::LoraAdd(int layer, LoraTarget target, const float* x, int64_t n, float* y) {
  LoraCall c;
  if (LoraCallFor(layer, target, &c)) LoraForward(backend_, c, x, n, y, lora_scratch_);
}

void LlamaModel::LoraGrad(int layer, LoraTarget target, const float* x, const float* dy, int64_t n, float* dx) {
  LoraCall c;
  if (LoraCallFor(layer, target, &c)) LoraBackward(backend_, c, x, dy, n, dx, lora_scratch_);
}

}  // namespace shard
