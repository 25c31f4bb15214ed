// The gloo backend: ranks are processes (or threads) connected by Gloo's TCP
// transport, loopback by default. Rendezvous publishes each rank's listening addresses
// in the KvStore under CommConfig.prefix, then every pair connects (a full mesh).
//
// Algorithms: Gloo's ring all-gather, tree broadcast and dissemination barrier.
// Reduce-scatter is shardd's own pipelined ring (ring_reduce_scatter.h) on Gloo's
// unbound buffers, because Gloo's ReduceScatterHalvingDoubling overwrites its input
// (the result lands at the start of the buffer), counts in int and builds its pair
// buffers per instance. All-reduce is that ring reduce-scatter followed by Gloo's
// all-gatherv: the bandwidth-optimal pair, and every buffer it waits on stays
// reachable by Abort(), unlike the scratch buffer inside Gloo's allreduce.
// Timeouts: shardd's rings honour CommOptions.timeout end to end; Gloo's algorithms
// apply it to each wait, so a call that keeps making slow progress can take longer.
//
// Failures: Abort() and errors hard-close this rank's connections so peers fail at
// once; a PeerWatchdog (peer_watchdog.h) notices peers that die while a call runs;
// peers that leave normally say goodbye first, so leaving is not mistaken for dying.
//
// Process-wide effect: the first communicator sets SIGPIPE to SIG_IGN (unless the
// program installed its own handler), so a dead peer is an error, not a crash.
//
// This header is free of Gloo includes on purpose: only files in this folder see Gloo.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommConfig& config);

}  // namespace shard
