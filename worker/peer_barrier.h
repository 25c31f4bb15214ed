// All ranks of an attempt registered before any communicator is made.
//
// A communicator's rendezvous waits only parallel.comm_timeout_s for its
// peers. Under the local launcher every rank starts at once, but the ranks of
// an external job (or of a Slurm/Kubernetes job on several nodes) may join
// minutes apart: a host whose link is down, whose agent loop is still
// restarting its workers. Without this barrier the ranks that joined first
// fail their rendezvous after comm_timeout_s and every such attempt burns a
// restart while the late host cannot even reach the coordinator. With it,
// how long the late ranks may take is the coordinator's call (its
// registration deadline ends the attempt, and the heartbeat tells this
// worker to leave).
#pragma once

#include <chrono>
#include <functional>

#include "shard/common/kv_store.h"
#include "shard/common/status.h"

namespace shardd {

struct PeerBarrierOptions {
  int rank = 0;
  int world = 1;
  // Backstop only: the coordinator's registration deadline normally ends the
  // wait first (by aborting the attempt).
  std::chrono::milliseconds limit{std::chrono::minutes(10)};
  // One wait call's length; an unreachable coordinator is retried until limit.
  std::chrono::milliseconds poll{std::chrono::seconds(5)};
};

// Announces this rank (key "peers/<rank>" in the attempt's rendezvous store)
// and waits until every rank has. DEADLINE_EXCEEDED names the missing ranks.
shard::Status WaitForPeers(shard::KvStore& kv, const PeerBarrierOptions& opts);

}  // namespace shardd
