// The proof that a committed step is complete, in one place: every reader of a
// checkpoint (resume, `shardctl checkpoints`, export, eval/generate --model
// STEP, the coordinator's choice of a restart step, retention) opens it through
// CheckpointReader::Open, which calls ProveStepComplete on the manifest and the
// shard headers it read. A step that fails the proof is not a checkpoint: it is
// skipped with fallback to the previous good one, never read half-filled.
#pragma once

#include <string>
#include <vector>

#include "shard/ckpt/manifest.h"
#include "shard/ckpt/shard_file.h"

namespace shard {

// Pure. headers[i] is the header of manifest.files[i]. Proves that
//  * the manifest lists shard_count files, each name once, each shard rank in
//    [0, shard_count) once, named as the commit protocol names them;
//  * every header belongs to this step and model and to the file it is listed
//    as (shard rank and count), with the manifest's units in order;
//  * for every unit, the headers' element ranges cover [0, numel) exactly once
//    (no gap, no overlap).
// Sizes and checksums need the files themselves: CheckpointReader::Open checks
// those before calling this. Errors are DATA_LOSS naming `where` and the culprit.
Status ProveStepComplete(const Manifest& manifest, const std::vector<ShardHeader>& headers, const std::string& where);

// Pure: the manifest's own list of files (names and shard ranks) is well
// formed, before any header is read (the first half of ProveStepComplete).
Status ProveFileList(const Manifest& manifest, const std::string& where);

}  // namespace shard
