// The local backend: ranks are threads of one process, collectives move data through
// shared memory (each rank reads its peers' buffers directly). For unit tests of
// everything built on the Communicator seam; honours timeouts, Abort and mismatched
// calls exactly like the process backends report them.
//
// Rendezvous is in process memory, by CommConfig.prefix: every thread of a group calls
// CreateCommunicator with the same prefix and world_size and its own rank (the store is
// not used). A prefix names one group at a time; once all ranks have joined, it is
// free to name a new one.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

StatusOr<std::unique_ptr<Communicator>> CreateLocalCommunicator(const CommConfig& config);

}  // namespace shard
