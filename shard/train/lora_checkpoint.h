// Checkpoints of a LoRA job: the adapters and their AdamW moments (MBs, not
// the GBs of the frozen base), the loop's counters, and the base model's
// identity, so a resume against another base is refused instead of training
// adapters that no longer fit their weights.
//
// Layout: <job_dir>/lora_step_<N>/ {adapters.safetensors (params, m, v per
// layer), state.json}. Rank 0 writes (every rank holds the same adapters):
// into a temp directory, fsynced, renamed into place, directory fsynced — a
// step directory exists only complete. keep_last prunes older ones. These
// steps are not reported to a coordinator: a restarted worker finds the newest
// itself (checkpoint.resume auto).
#pragma once

#include <cstdint>
#include <string>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"
#include "shard/train/lora_adapters.h"

namespace shard {

struct LoraCheckpointState {
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  int64_t samples_seen = 0;
  int64_t tokens_seen = 0;
  double loss_scale = 1;
  int64_t loss_scale_good_steps = 0;
  std::string run_fingerprint;
  std::string base_model;  // model.from_hf or the preset name
  std::string base_hash;   // BaseModelHash
};

// A content hash of the base: for model.from_hf, config.json as parsed (keys
// sorted: the same whatever its indentation) and `weights_hash`, the base's
// values (shard/train/base_weights_hash.h, summed over the ranks as they
// loaded it); for a preset, its shape and the init seed (its weights are a
// function of both).
StatusOr<std::string> BaseModelHash(const JobConfig& job, uint64_t shape_hash, uint64_t weights_hash);

Status SaveLoraCheckpoint(const std::string& job_dir, const LoraCheckpointState& state, const LoraAdapters& adapters,
                          int keep_last);

// The newest lora_step_* of this run (same fingerprint) in job_dir, "" = none.
StatusOr<std::string> FindLoraCheckpoint(const std::string& job_dir, const std::string& run_fingerprint);

// Loads a step directory into adapters (params, m, v) and *state. Refuses a
// step saved against another base (naming both) or with other adapter shapes.
Status LoadLoraCheckpoint(const std::string& step_dir, const std::string& base_hash, LoraAdapters* adapters,
                          LoraCheckpointState* state);

}  // namespace shard
