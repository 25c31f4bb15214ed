// A PEFT LoRA adapter folder applied to a model loaded for inference
// (shardctl eval/generate --adapter): every targeted weight becomes
// W + s·B·A in place (the merged export's arithmetic), so every inference path
// runs unchanged and exactly as the adapter-bound model does without dropout.
#pragma once

#include <string>

#include "shard/common/status.h"
#include "shard/train/local_params.h"

namespace shard {

// Refuses, naming the file, an adapter whose shapes do not fit m's model.
Status MergePeftAdapterInto(const std::string& adapter_dir, LoadedModel* m);

}  // namespace shard
