// Which HTTP connections the coordinator keeps when clients push (issue 39,
// item 10): the pure bookkeeping behind GuardedHttpServer, without sockets.
//
//  * PeerKey: the peer an address counts as. Every loopback address (all of
//    127.0.0.0/8, ::1, and their IPv4-mapped forms) is one peer, "loopback":
//    a local client can bind any of 127.0.0.1..127.255.255.254, so counting
//    them apart let one local process hold 16 connections per address.
//  * A connection is in headers from its accept (or, kept alive, from the end
//    of its last reply) until its request headers are complete; then serving
//    until the reply is written.
//  * At a cap (connections per peer, or in all), the oldest connection still
//    in headers (of that peer, or of any) is evicted to make room for the
//    newcomer; only when none is in headers is the newcomer refused. An idle
//    or slow client thus never locks out a prompt one such as a health probe.
//
// Thread-safety: ConnectionTable is not thread-safe (the server guards it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace shardd {

// "loopback" for 127/8, ::1 and ::ffff:127.x.y.z; the address itself (IPv4-
// mapped IPv6 as its IPv4 form) otherwise: shard::PeerOfAddress (shard/common/net_peer.h),
// the rule the partner-copy server shares.
std::string PeerKey(const std::string& address);

class ConnectionTable {
 public:
  ConnectionTable(int per_peer, int max_connections) : per_peer_(per_peer), max_(max_connections) {}

  struct Admission {
    bool admitted = false;
    int evicted = -1;    // a connection to close so the newcomer fits (-1: none)
    std::string reason;  // why refused, or why `evicted` was chosen
  };
  // Says whether a connection in headers has in fact sent them whole (they
  // wait unread in its socket): such a one is marked serving, not evicted.
  using HeadersArrived = std::function<bool(int id)>;
  // Counts connection `id` (a socket) from `peer`, in headers. An evicted
  // connection no longer counts; its owner closes it and calls Release.
  Admission Admit(int id, const std::string& peer, const HeadersArrived& arrived = nullptr);
  // Headers complete: the connection is serving, and is never evicted.
  void Serving(int id);
  // A kept-alive connection waits for its next request: in headers again,
  // as the youngest.
  void AwaitingRequest(int id);
  void Release(int id);
  bool evicted(int id) const;
  int count(const std::string& peer) const;  // counted connections of a peer
  int size() const { return counted_; }

 private:
  struct Conn {
    std::string peer;
    bool in_headers = true;
    bool evicted = false;
    uint64_t since = 0;  // order of entering headers: smaller is older
  };
  // The oldest counted connection still in headers (of `peer`, or of any
  // when empty) whose headers have not arrived; -1 when none.
  int OldestInHeaders(const std::string& peer, const HeadersArrived& arrived);
  void Evict(int id);

  const int per_peer_;
  const int max_;
  uint64_t next_since_ = 0;
  int counted_ = 0;
  std::map<int, Conn> conns_;
  std::map<std::string, int> per_peer_count_;  // counted connections; only peers with > 0
};

}  // namespace shardd
