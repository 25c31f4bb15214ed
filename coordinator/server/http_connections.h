// How the coordinator's HTTP server hands out its threads, so slow, idle or
// many clients cannot starve it (issue 28 item 12, issue 39 item 10).
// cpp-httplib 0.11 gives each accepted connection a pool thread for as long
// as the client keeps sending within the per-read timeout, and a kept-alive
// idle connection holds its thread too. GuardedHttpServer replaces that part:
//  * a waiting room: a connection holds no thread until its request's first
//    bytes arrive; one poll thread watches them all. A kept-alive connection
//    goes back there between requests;
//  * a deadline for the request headers counted from the accept
//    (header_timeout_s): a connection that has not sent whole headers by then
//    is dropped, however steadily it trickles;
//  * caps on connections per peer and in all (ConnectionTable: all of 127/8
//    and ::1 are one peer). At a cap the oldest connection still in headers
//    is evicted for the newcomer; only if none is, the newcomer gets a 503;
//  * a reserve: while fewer than `reserve` threads are free, a connection a
//    thread picks up gets busy_header_timeout_s, so the last threads turn
//    over quickly.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/server/connection_limits.h"
#include "coordinator/server/connection_table.h"

namespace shardd {

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);
  ~GuardedHttpServer() override;
  // Connections refused (503) since start: a cap reached with none to evict.
  size_t refused() const;
  // Connections evicted (closed in their headers) for a newcomer since start.
  size_t evicted() const;
  // After bind: cpp-httplib 0.11 listens with a backlog of 5, so a burst of
  // connections waits in SYN retransmits (1 s, 2 s, ...) before admission
  // even sees it. Linux takes a second listen() as a new backlog.
  bool RaiseListenBacklog(int backlog);

 private:
  using Clock = std::chrono::steady_clock;
  // A connection waiting for its (next) request, or ready for a thread.
  struct Pending {
    socket_t sock;
    Clock::time_point deadline;  // waiting: dropped then; ready: the headers' deadline
    size_t requests_left;        // keep-alive requests it may still make
    bool fresh;                  // no request yet: the accept's deadline covers its headers
  };
  // Called by httplib's accept loop (through an inline task queue) on the
  // accept thread: admits the socket to the waiting room or refuses it.
  bool process_and_close_socket(socket_t sock) override;
  void WaitingRoom();
  void Worker();
  // Serves requests on the connection while they come at once; true when it
  // is kept alive (back to the waiting room), false to close it.
  bool Serve(Pending* p);
  void Refuse(socket_t sock, const std::string& why);
  void Wake();
  // Forgets the connection and closes it. With mu_ NOT held.
  void Close(socket_t sock);
  void ShutdownPool();
  friend class InlineTaskQueue;

  const ConnectionLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  ConnectionTable table_;           // guarded by mu_; Release before close, so an fd is never reused under it
  std::vector<Pending> waiting_;    // guarded by mu_
  std::deque<Pending> ready_;       // guarded by mu_
  std::set<socket_t> serving_;      // guarded by mu_
  int busy_ = 0;                    // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  size_t refused_ = 0;              // guarded by mu_
  size_t evicted_ = 0;              // guarded by mu_
  Clock::time_point last_refusal_log_{};  // guarded by mu_
  int wake_fd_ = -1;                // eventfd: new waiting connections, stop
  std::vector<std::thread> threads_;
  std::thread waiting_room_;
};

}  // namespace shardd
