// The commit record of a checkpoint step: "<job dir>/step_00000100/COMMITTED".
// Written last, atomically, by exactly one party (rank 0 in standalone mode;
// the coordinator under the control plane) once every shard is reported.
// A step directory without it is not a checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shard/common/status.h"

namespace shard {

inline constexpr const char* kCommittedFile = "COMMITTED";
inline constexpr int kManifestVersion = 1;

struct ManifestFile {
  std::string name;
  int shard_rank = 0;
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};

struct Manifest {
  std::string job;
  int64_t step = 0;             // optimizer steps completed
  int world = 1;
  std::string strategy;
  int shard_count = 1;          // files (one per shard of the shard group)
  uint64_t model_hash = 0;      // LlamaConfig::ShapeHash
  std::string model_config;     // HF config.json text, for export
  // model.from_hf's own config.json as it was (every key transformers reads:
  // bos/eos ids, sliding_window, ...), so an export of this step keeps it
  // (shard/spec/hf_config_export.h). "" for a preset-built model; optional on disk.
  std::string source_config;
  std::vector<std::pair<std::string, int64_t>> units;  // name, numel
  std::vector<ManifestFile> files;
  // Data position and optimizer/schedule state.
  int64_t samples_seen = 0;     // global sampler cursor
  uint64_t seed = 0;
  bool shuffle = true;
  int64_t global_batch = 0;
  // What the cursor indexes (e.g. the prepared SFT dataset's source hash,
  // tokenizer and packing); "" when unknown. Optional on disk.
  std::string data_fingerprint;
  int64_t total_steps = 0;
  int64_t tokens_seen = 0;
  // Optimizer updates applied (AdamW's bias-correction count). Equal to step
  // unless a loss scaler skipped steps; absent on disk (older manifests) = step.
  int64_t optimizer_steps = 0;
  // The loss scaler (shard/optim/loss_scaler.h): its mode ("off", "static",
  // "dynamic"), scale and clean-step count. Absent on disk (older manifests):
  // off, scale 1, count 0.
  std::string loss_scale_mode = "off";
  double loss_scale = 1.0;
  int64_t loss_scale_good_steps = 0;
  // The run that wrote this step (shard/spec/run_fingerprint.h): a hash of
  // what defines it and the keys themselves, so a refusal to resume another
  // run's step can name what differs. Absent on disk (older manifests): "" and
  // empty — an unknown run.
  std::string run_fingerprint;
  std::map<std::string, std::string> run_keys;
  // A dpo/ipo run's reference model: the starting model's part of its
  // reference files' keys (16 hex digits; shard/train/preference_training.cc),
  // so a resumed full fine-tune, which never loads its starting weights again,
  // finds the values its first attempt computed from them. Absent on disk: "".
  std::string reference;

  std::string ToJson() const;
  // allow_partial: accept fewer files than shard_count (a run-state base
  // travelling in a checkpoint report, before the commit adds every file).
  static StatusOr<Manifest> FromJson(const std::string& text, const std::string& source, bool allow_partial = false);
};

std::string StepDirName(int64_t step);  // "step_00000100"

}  // namespace shard
