// config.json of an exported HF folder. A model that came from an HF folder
// (model.from_hf) keeps that folder's config.json as it was — bos/eos ids,
// initializer_range, use_cache, sliding_window, max_window_layers and every
// key the engine does not read — with only what training changed: the
// export dtype (torch_dtype, and "dtype" where the source spells it so). When
// the engine's model no longer matches the source (a family conversion or a
// changed shape), the keys the engine writes take the engine's values and the
// rest is kept. A preset-built model (no source) gets the engine's generated
// config (LlamaConfig::ToHfConfigJson) with its torch_dtype.
//
// Where the source comes from: the trainer reads model.from_hf/config.json
// once at start and keeps it in every checkpoint's COMMITTED manifest
// ("source_config"), so `shardctl export` of a step writes the same config
// even when the HF folder is gone.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/spec/llama_config.h"
#include "shard/tensor/dtype.h"

namespace shard {

// transformers' torch_dtype spelling of an export dtype: float32, bfloat16, float16.
const char* TorchDTypeName(DType dtype);

// The config.json text (2-space indented, newline-terminated) for a model
// whose engine config is `model`, exported in `dtype`. source_config: the
// source folder's config.json text, or "" for a preset-built model. A source
// that is not a JSON object, or not a config the engine reads, is an error
// naming `where`.
StatusOr<std::string> ExportedHfConfigJson(const LlamaConfig& model, const std::string& source_config, DType dtype,
                                           const std::string& where);

// generation_config.json as transformers' save_pretrained derives it from a
// model config that has none of its own: {"_from_model_config": true} and
// the config's bos_token_id, eos_token_id, pad_token_id and
// decoder_start_token_id (those set and not null). config_json: config.json text.
StatusOr<std::string> GenerationConfigFromModelConfig(const std::string& config_json, const std::string& where);

}  // namespace shard
