// Notices a dead peer while a collective is running, even where Gloo would not.
//
// Why: when a peer dies, Gloo fails the operations still queued on that pair, but not
// an unbound-buffer send already being written to the socket, nor a wait on another
// pair. A rank waiting for such a send (ring algorithms wait for their sends to the
// next rank) would sleep until its timeout — minutes — although the peer is gone.
//
// How: one "sentinel" receive of one byte is posted per peer, on a slot used for
// nothing else, so it stays queued on the pair and Gloo fails it the moment the pair
// fails. A peer that leaves normally (its communicator is destroyed) first sends one
// goodbye byte (SayGoodbye): that completes the sentinel, which takes it off the pair's
// queue, so the connection closing afterwards fails nothing. While `busy()` is true, a
// thread probes each sentinel every `period` without blocking (abortWaitRecv, then
// waitRecv, which throws at once if the pair failed) and calls `on_failure(peer,
// message)` once, for the first peer whose connection failed without a goodbye. A
// failure Gloo caused itself because this rank timed out ("Application timeout caused
// pair closure") is left to the timed-out call.
//
// Lifetime: Gloo's device thread may still write into a sentinel until the pair is
// closed, so the watchdog keeps the context alive and destroys it (closing every pair)
// before the sentinels. Give it the last reference: the owner must drop its own
// context reference first (declare the watchdog before the context member).
//
// Thread-safety: the sentinels are touched by the constructor, the probe thread and
// the destructor only; SayGoodbye must not run concurrently with a collective. The
// callbacks run on the probe thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace shard::comm {

class PeerWatchdog {
 public:
  // Posts the sentinels (throws what Gloo throws if a pair is already broken).
  PeerWatchdog(std::shared_ptr<::gloo::Context> context, std::function<bool()> busy,
               std::function<void(int peer, const std::string& message)> on_failure,
               std::chrono::milliseconds period = std::chrono::milliseconds(50));
  ~PeerWatchdog();
  PeerWatchdog(const PeerWatchdog&) = delete;
  PeerWatchdog& operator=(const PeerWatchdog&) = delete;

  // Tells every peer this rank is leaving normally; waits up to `timeout` for the
  // bytes to be written. Never throws.
  void SayGoodbye(std::chrono::milliseconds timeout);

  // Starts the probe thread (once the callbacks' targets exist); Stop() joins it, after
  // which no callback runs. Stop is idempotent and also run by the destructor.
  void Start();
  void Stop();

 private:
  void Loop();
  // True while peer's connection is healthy (or the peer left normally).
  bool Probe(int peer, std::string* message);

  // Declared before context_, so destroyed after it: see "Lifetime" above.
  std::vector<char> inbox_;  // one byte per peer; goodbyes land here (sized once)
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> sentinels_;  // by peer
  std::shared_ptr<::gloo::Context> context_;
  const std::function<bool()> busy_;
  const std::function<void(int, const std::string&)> on_failure_;
  const std::chrono::milliseconds period_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace shard::comm
