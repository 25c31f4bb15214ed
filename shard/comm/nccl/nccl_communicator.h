// The nccl backend: one rank per GPU (the device current on the creating
// thread). Rank 0 creates the NCCL unique id and publishes it in the KvStore
// under CommConfig.prefix (namespaced by job and attempt, so a restarted
// attempt never reads a stale id); the others read it from there.
//
// * Non-blocking NCCL (ncclConfig_t.blocking = 0): init and every call are
//   polled against a deadline (CommConfig.timeout, CommOptions.timeout); on a
//   timeout, an NCCL error (a peer died: ncclRemoteError) or Abort() the
//   communicator is torn down with ncclCommAbort and every later call fails.
// * A dedicated non-blocking stream carries the collectives. Ordering is by
//   stream event: given the compute stream (CommConfig::device_stream), each
//   call records an event on it and makes the collective's stream wait for
//   that event, so the collective runs after every op queued before the call
//   (the buffers it reads are complete; buffers it writes are no longer in
//   use) while the calling thread never blocks on compute. A caller that
//   queues calls for another thread passes the event it recorded when it
//   queued them (CommOptions::ready_event), so compute queued later does not
//   delay the collective. Without a compute stream each call synchronises
//   the whole device first (correct, but it serialises communication with
//   compute). Completion is unchanged: a call returns once the collective
//   finished (polled), so callers read results and free buffers as before.
//   Overlap with compute comes from the caller's communication thread
//   (shard/fsdp/comm_thread.h) plus this ordering.
// * AllReduceMany over device buffers is one NCCL group (ncclGroupStart/End).
// * Buffers may be device memory (the usual case) or host memory (small
//   scalars such as the loss sum, offloaded gradient shards): host data is
//   staged through a device scratch buffer on the collective's stream. Host
//   buffers must be complete when passed: their staging copy is not ordered
//   after the compute stream (a pending CopyToHostAsync into one must be
//   waited for first, as the FSDP runtime does).
//
// This header is free of CUDA and NCCL includes: only nccl/ sees them.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

// UNAVAILABLE "nccl: no CUDA device (...)" without a usable GPU.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommConfig& config);

}  // namespace shard
