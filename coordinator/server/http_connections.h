// How the coordinator's HTTP server hands out its threads, so slow or many
// clients cannot starve it (issue 28, item 12). cpp-httplib 0.11 gives each
// accepted connection a pool thread for as long as the client keeps sending
// within the per-read timeout, so a client trickling one header line every
// few seconds holds a thread forever. GuardedHttpServer replaces that part:
//  * per-peer cap: a peer IP's connections beyond per_peer are answered 503
//    and closed on the accept thread, before they take a thread or a queue slot;
//  * a deadline for a whole request (line, headers and the small bodies this
//    server takes), not per read: header_timeout_s;
//  * a reserve: while fewer than `reserve` threads are free, a connection a
//    thread picks up gets busy_header_timeout_s instead, so the last threads
//    turn over quickly and a prober (one packet) still gets through when
//    several peers each hold their share.
// Idle keep-alive connections still close after the server's keep-alive
// timeout and each read after its read timeout, as before.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/server/connection_limits.h"

namespace shardd {

// Connections per peer address. Thread-safe (one mutex).
class PeerConnections {
 public:
  explicit PeerConnections(int per_peer) : per_peer_(per_peer) {}
  // Counts a connection from `peer`; false (and nothing counted) at the cap.
  bool Admit(const std::string& peer);
  void Release(const std::string& peer);
  int count(const std::string& peer) const;

 private:
  const int per_peer_;
  mutable std::mutex mu_;
  std::map<std::string, int> count_;  // guarded by mu_; only peers with > 0
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);
  ~GuardedHttpServer() override;
  // Connections refused for the per-peer cap or a full queue, since start.
  size_t refused() const;
  // After bind: cpp-httplib 0.11 listens with a backlog of 5, so a burst of
  // connections waits in SYN retransmits (1 s, 2 s, ...) before admission
  // even sees it. Linux takes a second listen() as a new backlog.
  bool RaiseListenBacklog(int backlog);

 private:
  // Called by httplib's accept loop (through an inline task queue) on the
  // accept thread: admits the socket to the pool or refuses it at once.
  bool process_and_close_socket(socket_t sock) override;
  void Worker();
  void Serve(socket_t sock);
  void Refuse(socket_t sock, const std::string& why);
  void ShutdownPool();
  friend class InlineTaskQueue;

  const ConnectionLimits limits_;
  PeerConnections peers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<socket_t, std::string>> queue_;  // guarded by mu_
  std::set<socket_t> serving_;                          // guarded by mu_
  int busy_ = 0;                                        // guarded by mu_
  bool stopping_ = false;                               // guarded by mu_
  size_t refused_ = 0;                                  // guarded by mu_
  std::chrono::steady_clock::time_point last_refusal_log_{};  // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace shardd
