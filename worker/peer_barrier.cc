#include "worker/peer_barrier.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "shard/common/logging.h"

namespace shardd {

namespace {
std::string PeerKey(int rank) { return "peers/" + std::to_string(rank); }
}  // namespace

shard::Status WaitForPeers(shard::KvStore& kv, const PeerBarrierOptions& opts) {
  if (opts.world <= 1) return shard::OkStatus();
  std::vector<std::string> keys;
  for (int r = 0; r < opts.world; ++r) keys.push_back(PeerKey(r));
  const auto deadline = std::chrono::steady_clock::now() + opts.limit;
  shard::Status last = shard::OkStatus();
  bool announced = false;
  bool said = false;
  while (std::chrono::steady_clock::now() < deadline) {
    // Set inside the loop: a coordinator that was unreachable may not have it yet.
    if (!announced) {
      last = kv.Set(PeerKey(opts.rank), "1");
      announced = last.ok();
    }
    if (announced) {
      last = kv.Wait(keys, opts.poll);
      if (last.ok()) return shard::OkStatus();
    }
    if (last.code() != shard::StatusCode::kDeadlineExceeded && last.code() != shard::StatusCode::kUnavailable)
      return last;
    if (!said) {
      LOG_INFO("rank {}: waiting for the other ranks of this attempt to register before the rendezvous", opts.rank);
      said = true;
    }
    if (!announced) std::this_thread::sleep_for(std::min(opts.poll, std::chrono::milliseconds(500)));
  }
  // Name who is missing.
  std::string missing;
  for (int r = 0; r < opts.world; ++r) {
    auto has = kv.Check(PeerKey(r));
    if (!has.ok() || !*has) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return shard::DeadlineExceeded("rank " + std::to_string(opts.rank) + ": rank(s) " +
                                 (missing.empty() ? std::string("?") : missing) + " never registered within " +
                                 std::to_string(opts.limit.count() / 1000) + " s (last: " + last.ToString() + ")");
}

}  // namespace shardd
