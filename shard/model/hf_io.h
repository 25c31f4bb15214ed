// Hugging Face weight folders (config.json + safetensors) <-> flat unit buffers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shard/ckpt/hf_weights.h"
#include "shard/common/status.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/tensor/dtype.h"

namespace shard {

// The HF folder's weights checked against `layout` before anything is read:
// every tensor the model needs is present with its shape, and the folder holds
// no tensor the model does not have (rotary inv_freq buffers and, for tied
// models, a duplicate lm_head.weight are ignored). The files stay
// memory-mapped; ReadHfUnitRange then reads just the bytes a rank needs.
StatusOr<HfWeights> OpenHfWeightsFor(const std::string& dir, const LlamaConfig& config, const ParamLayout& layout);

// Elements [begin, end) of `unit`'s flat buffer (ParamLayout order), read from
// the tensors that cover them and converted to fp32 straight into dst
// (end - begin floats); elements at or past unit.numel (shard padding) are left
// as they are. Only the bytes of that range are touched (the files are mapped),
// so a rank reading its shard never holds more of the model than the shard.
// An inf/NaN value is refused (INVALID_ARGUMENT naming the tensor and element).
Status ReadHfUnitRange(const HfWeights& weights, const UnitSpec& unit, int64_t begin, int64_t end, float* dst);

// Reads every tensor of `layout` from the HF folder into units[u] (resized to
// the unit's numel). Fails, naming the tensor, on a missing tensor, a shape or
// dtype mismatch, or a tensor the model does not have (rotary inv_freq buffers
// and, for tied models, a duplicate lm_head.weight are ignored).
Status LoadHfWeights(const std::string& dir, const ParamLayout& layout, std::vector<std::vector<float>>* units);

// Writes config.json + safetensors (one file, or shards with an index above
// max_file_bytes) to `dir`. `get_unit(u, &buf)` supplies unit u's full flat
// buffer; units are requested one at a time, so peak memory is one unit.
Status ExportHf(const std::string& dir, const LlamaConfig& config, const ParamLayout& layout,
                const std::function<Status(int, std::vector<float>*)>& get_unit, DType dtype,
                int64_t max_file_bytes = int64_t{5} << 30);

}  // namespace shard
