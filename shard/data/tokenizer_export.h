// The tokenizer half of an exported HF folder: the tokenizer folder's files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
// tokenizer.model, chat_template.jinja, those present) copied beside the
// weights, and generation_config.json — the folder's own when it has one
// (its sampling defaults kept), with the tokenizer's bos/eos and the given
// stop ids merged into bos_token_id/eos_token_id — so AutoTokenizer and
// generation find what they need in the folder as it is, and generation
// stops where the fine-tune taught the model to end a turn.
//
// Thread-safety: pure function over files.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/data_config.h"
#include "shard/spec/llama_config.h"
#include "shard/tensor/dtype.h"

namespace shard {

// tokenizer: a LoadTokenizer spec (folder or file). "byte" copies nothing and
// writes no generation_config.json. stop_ids: more ids eos_token_id must list
// (ChatFormat::TurnEnd of the data's template). Returns the file names
// written; a generation_config.json that is not a JSON object, or whose
// eos_token_id is not an id of the tokenizer, is an error naming it.
StatusOr<std::vector<std::string>> ExportTokenizerFiles(const std::string& tokenizer, const std::string& out_dir,
                                                        const std::vector<int32_t>& stop_ids = {});

// ExportTokenizerFiles with the end-of-turn token of `chat_template` (a
// data.template spelling: auto, hf, hf:NAME, plain, llama2, llama3, chatml)
// as the stop id (ChatFormat::TurnEnd): what a model fine-tuned on that
// template ends its replies with. "" or "byte" tokenizers: nothing written.
StatusOr<std::vector<std::string>> ExportChatTokenizer(const std::string& tokenizer, const std::string& chat_template,
                                                       const std::string& out_dir);

// What a training job's export (export.hf_dir) takes along beside the
// weights, so the folder loads and generates as it is: an SFT job's data
// tokenizer with its chat template's turn end (ExportChatTokenizer); a
// token-stream job's data.tokenizer folder when named, else model.from_hf's:
// its tokenizer files and generation_config.json as they are (the token
// file's ids are that tokenizer's; no template adds a stop id), the latter's
// eos ids checked against the model's vocabulary. A preset model on byte
// ids: nothing.
StatusOr<std::vector<std::string>> ExportJobTokenizer(const DataConfig& data, const std::string& from_hf,
                                                      int64_t model_vocab_size, const std::string& out_dir);

// The config half of an exported HF folder, written after the weights and
// the tokenizer files: config.json (ExportedHfConfigJson: the source's own
// when source_config is set, else the engine's), and generation_config.json
// when the tokenizer export (its returned names: tokenizer_files) wrote none
// — as save_pretrained does, derived from that config.json (bos/eos/pad ids),
// so every exported folder has one. Returns the file names written.
StatusOr<std::vector<std::string>> WriteExportedConfigs(const std::string& out_dir, const LlamaConfig& model,
                                                        const std::string& source_config, DType dtype,
                                                        const std::vector<std::string>& tokenizer_files);

}  // namespace shard
