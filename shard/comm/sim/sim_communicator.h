// The sim backend: a communicator that moves nothing. The memory simulator
// (shard/sim/memory_sim.h) runs one rank of a job as it would run in a world
// of world_size ranks — ranks hold equal, padded shards, so one stands for all
// — and every collective returns OK at once with the buffers untouched
// (they are simulated memory: sim_backend.h). Validation is the real one:
// counts of zero are legal, a negative count or a null buffer is refused.
// CommOptions::ready_event, when set, is a sim backend event: an
// std::atomic<int> the call sets to 1 when it is done, which is how the
// backend's compute waits for the collectives queued before it.
//
// Thread-safety: as every communicator (one thread calls the collectives).
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

StatusOr<std::unique_ptr<Communicator>> CreateSimCommunicator(const CommConfig& config);

}  // namespace shard
