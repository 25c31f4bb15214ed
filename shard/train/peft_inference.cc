#include "shard/train/peft_inference.h"

#include <vector>

#include "shard/ckpt/peft_adapter.h"
#include "shard/model/lora_linear.h"
#include "shard/spec/lora_layout.h"

namespace shard {

Status MergePeftAdapterInto(const std::string& dir, LoadedModel* m) {
  ASSIGN_OR_RETURN(PeftConfig peft, ReadPeftAdapterConfig(dir));
  const LoraLayout ll = LoraLayout::For(m->config, peft);
  std::vector<std::vector<float>> layers;
  RETURN_IF_ERROR(ReadPeftAdapter(dir, peft, ll, &layers).WithContext("--adapter " + dir));
  const float scale = static_cast<float>(peft.scale());
  std::vector<float> unit;
  for (int l = 0; l < m->config.num_layers; ++l) {
    const int u = m->layout.block_unit(l);
    m->params->CopyUnitToHost(u, &unit);
    MergeLoraLayer(ll, m->layout.units[u], scale, layers[l].data(), unit.data());
    m->backend->CopyToDevice(m->params->params(u), unit.data(), unit.size() * sizeof(float));
  }
  return OkStatus();
}

}  // namespace shard
