// What a checkpoint listing says of one step folder (`shardctl checkpoints
// DIR`, the coordinator's ListCheckpoints): which step it holds — the
// manifest's, not the folder name's — and whether it is valid, meaning what
// every reader needs: the step proof (CheckpointReader::Open) and a model
// config that export, eval and generate read (StepModelConfig). A step
// listed valid is one `shardctl export` takes.
//
// Thread-safety: pure functions over files.
#pragma once

#include <cstdint>
#include <string>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/manifest.h"
#include "shard/spec/llama_config.h"

namespace shard {

// The model config of a committed step's manifest, checked as every reader of
// the weights needs it: an HF config that parses and validates (sizes in
// range: not 0 layers, not 1e15 parameters), whose shape hash is the
// manifest's model_hash and whose units are the manifest's (names and sizes,
// in order). Errors are INVALID_ARGUMENT/DATA_LOSS naming step_dir.
StatusOr<LlamaConfig> StepModelConfig(const Manifest& manifest, const std::string& step_dir);

struct StepListing {
  int64_t step = 0;         // the manifest's step when it reads, else the folder name's
  int64_t folder_step = 0;  // from the folder's name (step_00000030 → 30)
  std::string dir;
  bool committed = false;
  bool valid = false;       // committed, proven complete, model config readable
  std::string problem;      // why not valid ("" when valid)
  int world = 0;            // from the manifest (0: unreadable)
  int files = 0;            // shard files the manifest lists
  int64_t manifest_bytes = 0;  // their sizes, summed
  std::string strategy;
};

// Describes one step folder of ListSteps. verify_checksums re-reads every
// shard file (what `shardctl checkpoints DIR` does; the coordinator's listing
// stays cheap without).
StepListing DescribeStep(const StepInfo& step, bool verify_checksums);

}  // namespace shard
