// Model converters (as TorchTitan's): each turns chosen parameters of the
// model into another storage before the FSDP runtime shards them, by setting
// the runtime's options for those units; the runtime then stores, gathers and
// exports what it was told, whatever converter asked.
//
//   FreezeConverter: every unit frozen (LoRA's base): no gradient, no
//     optimizer state, its shard kept in the compute dtype (no fp32 master).
//   Nf4Converter: the block units' 2-D weights as NF4 records (QLoRA's base,
//     qlora_base.h); 1-D tensors kept exact. Needs a frozen base first.
//
// ModelConvertersFor gives a job's converters in the order they apply; the
// trainer applies them once, after the precision plan and before sharding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/fsdp/fsdp_options.h"
#include "shard/spec/job_config.h"
#include "shard/spec/param_layout.h"

namespace shard {

class ModelConverter {
 public:
  virtual ~ModelConverter() = default;
  virtual std::string name() const = 0;
  // Sets how `layout`'s units are stored in `options` (the precision applied).
  virtual Status Convert(const ParamLayout& layout, FsdpOptions* options) const = 0;
};

std::unique_ptr<ModelConverter> FreezeConverter();
std::unique_ptr<ModelConverter> Nf4Converter(int block_size, bool double_quant);

// peft: the frozen base; peft: method qlora: then its linear layers as NF4.
std::vector<std::unique_ptr<ModelConverter>> ModelConvertersFor(const JobConfig& job);

// Applies `converters` in order; an error names the converter.
Status ApplyConverters(const std::vector<std::unique_ptr<ModelConverter>>& converters, const ParamLayout& layout,
                       FsdpOptions* options);

}  // namespace shard
