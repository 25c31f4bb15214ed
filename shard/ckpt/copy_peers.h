// Who the partner-copy server (shard_copy.h) is serving: its connections by
// peer, with the caps that keep a stranger from stalling it. Pure
// bookkeeping (no sockets), tested alone.
//
// A connection is "sending its header" from accept until its key checked
// out. Those are capped: max_total in all and max_per_peer from one peer.
// A newcomer over a cap evicts the oldest connection still sending its header
// (of its own peer when that peer is at its cap, else of anyone), so a
// newcomer is never turned away and a stranger's idle sockets only ever push
// out each other. A connection whose key checked out (only the job's ranks
// hold the key) is never evicted; those are capped apart, at max_keyed
// copies in progress. A peer is an IP address; all of 127/8, ::1 and their
// IPv4-mapped forms are one peer ("loopback"), so a host cannot spread idle
// sockets over 127.0.0.2, 127.0.0.3, ... to dodge the per-peer cap.
//
// Thread-safety: none; the server holds its mutex around every call.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <string>

namespace shard {

// The peer of a socket address (shard/common/net_peer.h: its IP, or
// "loopback" for 127/8, ::1 and ::ffff:127/104).
std::string CopyPeerOf(const sockaddr_storage& addr);

class CopyConnections {
 public:
  CopyConnections(int max_total, int max_per_peer, int max_keyed)
      : max_total_(max_total), max_per_peer_(max_per_peer), max_keyed_(max_keyed) {}

  struct Admission {
    uint64_t id = 0;    // the newcomer's id
    int evict_fd = -1;  // a connection to shut down (already forgotten here), or -1
  };
  Admission Admit(const std::string& peer, int fd);
  // The connection's key checked out: it is never evicted now. false when
  // it was evicted meanwhile, or max_keyed copies are in progress (refuse it).
  bool MarkKeyed(uint64_t id);
  // The connection ended (served, refused, timed out or evicted).
  void Release(uint64_t id);

  int open() const { return static_cast<int>(conns_.size()); }
  int evicted() const { return evicted_; }
  template <typename F>
  void ForEachFd(F f) const {
    for (const auto& [id, c] : conns_) f(c.fd);
  }

 private:
  struct Conn {
    std::string peer;
    int fd = -1;
    bool keyed = false;
  };
  // The oldest connection still sending its header (of `peer`; of anyone
  // when peer is empty); conns_.end() if none.
  std::map<uint64_t, Conn>::iterator OldestUnkeyed(const std::string& peer);
  void Forget(std::map<uint64_t, Conn>::iterator it);

  int max_total_, max_per_peer_, max_keyed_;
  uint64_t next_id_ = 1;  // ids grow with time: the map's order is the age order
  std::map<uint64_t, Conn> conns_;
  std::map<std::string, int> unkeyed_per_peer_;
  int unkeyed_ = 0, keyed_ = 0;
  int evicted_ = 0;
};

}  // namespace shard
