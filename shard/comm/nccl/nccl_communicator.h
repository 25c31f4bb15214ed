// The nccl backend: one rank per GPU (the device current on the creating
// thread). Rank 0 creates the NCCL unique id and publishes it in the KvStore
// under CommConfig.prefix (namespaced by job and attempt, so a restarted
// attempt never reads a stale id); the others read it from there.
//
// * Non-blocking NCCL (ncclConfig_t.blocking = 0): init and every call are
//   polled against a deadline (CommConfig.timeout, CommOptions.timeout); on a
//   timeout, an NCCL error (a peer died: ncclRemoteError) or Abort() the
//   communicator is torn down with ncclCommAbort and every later call fails.
// * A dedicated non-blocking stream carries the collectives. Calls are
//   host-synchronous for now: a call first waits for the work already queued
//   on this device (so buffers produced by the compute stream are complete)
//   and returns once the collective finished. Overlap with compute comes from
//   the caller's communication thread (shard/fsdp/comm_thread.h), not from
//   stream events; finer ordering with events is left for later.
// * Buffers may be device memory (the usual case) or host memory (small
//   scalars such as the loss sum): host data is staged through a device
//   scratch buffer.
//
// This header is free of CUDA and NCCL includes: only nccl/ sees them.
#pragma once

#include <memory>

#include "shard/comm/communicator.h"

namespace shard {

// UNAVAILABLE "nccl: no CUDA device (...)" without a usable GPU.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommConfig& config);

}  // namespace shard
