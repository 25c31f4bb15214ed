// The gloo backend: ranks are processes (or threads) connected by Gloo's TCP
// transport, loopback by default. Rendezvous publishes each rank's listening addresses
// in the KvStore under CommConfig.prefix, then every pair connects (a full mesh).
//
// Algorithms: Gloo's ring all-gather, ring all-reduce, tree broadcast and barrier;
// reduce-scatter is shardd's own pipelined ring (ring_reduce_scatter.h) built on
// Gloo's unbound buffers, because Gloo's halving-doubling version leaves blocks out of
// rank order, limits counts to int and cannot read from a const input.
//
// This header is free of Gloo includes on purpose: only files in this folder see Gloo.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommConfig& config);

}  // namespace shard
