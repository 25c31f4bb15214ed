// The memory tier's partner copy between hosts (docs/control-plane.md,
// "Checkpoint tiers"): a small TCP side channel, one server per worker,
// serving its host's memory-tier folder. Its address is published in the
// attempt's rendezvous store, so nothing else needs configuring.
//
// Why a side channel and not the communicator: the copy is host memory to
// host memory (tmpfs), while an nccl communicator moves device buffers; it
// runs on the checkpoint's background thread, while a communicator's calls
// must stay ordered on the training thread; and a replaced host's rank fetches
// at start-up from a peer that makes no matching call (the peer's server
// answers). The cost: one more listening port per worker.
//
// Wire (version 2, little-endian): request "SHCP", u32 version, u16+bytes
// key, u8 op (1 PUT, 2 GET), u16+bytes step folder name, u16+bytes file name,
// PUT: u64 size, u64 xxh64. A reply is u8 code (0 ok, 1 not here, 2 error) and
// u16+bytes message. GET: one reply, then on ok u64 size, u64 xxh64 and the
// bytes. PUT: a first reply (the go-ahead: key, names and room checked), and
// only on ok the bytes, then a second reply (stored, xxh64 checked). The
// server reads a whole header before it answers, so a refusal never meets
// unread bytes (a close would reset the connection and lose the answer).
// Every socket call has a timeout. Names are checked (a step folder
// "step_NNNNNNNN", a file name of [A-Za-z0-9._-] not starting with '.'), so
// a peer never reaches outside the served folder.
//
// Who may not stall it: every connection is served on a thread of its own.
// A connection must send its whole header, key included, within
// header_timeout (seconds), else it is closed; at most max_connections are
// sending their header at once, max_per_peer from one peer (all of 127/8
// and ::1 are one peer; copy_peers.h), and a newcomer over a cap evicts the
// oldest of them. Only a connection whose key checked out gets io_timeout
// for its bytes (at most max_copies at once). So idle sockets, however many,
// only push out each other, never a copy.
//
// Who may call: a server answers only requests that carry its key, 32 random
// hex digits made at Start and published with its address in the attempt's
// rendezvous store (the endpoint "host:port#key"), which only the job's
// workers can read (the coordinator asks for the job's worker token). Nothing
// else on the network can put files into a host's tmpfs or read its shards.
// A PUT larger than the free space under the served folder is refused before
// any byte is taken (tmpfs is the host's memory).
//
// Thread-safety: ShardCopyServer accepts on its own thread and serves each
// connection on one more (on_put calls are serialised); Start/Stop from one
// thread; Stop waits for every connection's thread. The client functions are safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "shard/ckpt/copy_peers.h"
#include "shard/common/status.h"

namespace shard {

struct ShardCopyServerOptions {
  std::chrono::milliseconds io_timeout{30000};     // a keyed request's bytes, after its header
  std::chrono::milliseconds header_timeout{4000};  // the whole header (key included), from accept
  int max_connections = 8;                         // still sending their header, at once
  int max_per_peer = 4;                            // of those, from one peer (127/8 and ::1: one peer)
  int max_copies = 32;                             // keyed copies in progress at once (beyond: refused)
};

class ShardCopyServer {
 public:
  // root: the host's memory-tier folder; a PUT lands in root/<step>/<file>.
  // on_put (may be empty): called after each stored file with its step folder
  // (the host's retention runs there).
  ShardCopyServer(std::string root, std::function<void(const std::string& step_dir)> on_put = {});
  ~ShardCopyServer();
  // Listens on bind_host (an address of this host) at an ephemeral port.
  Status Start(const std::string& bind_host, const ShardCopyServerOptions& options);
  Status Start(const std::string& bind_host, std::chrono::milliseconds io_timeout);  // other options default
  void Stop();
  // "host:port#key", what the clients dial: publish it (valid after Start).
  std::string endpoint() const { return address_ + "#" + key_; }
  // "host:port", for logs.
  std::string address() const { return address_; }
  int files_received() const { return received_.load(); }
  // Connections turned out to admit a newcomer (copy_peers.h), and those open now.
  int evicted() const;
  int open_connections() const;

 private:
  void Serve();
  void Handle(int fd, uint64_t id, const std::string& peer);

  std::string root_;
  std::function<void(const std::string&)> on_put_;
  std::chrono::milliseconds io_timeout_{30000};
  std::chrono::milliseconds header_timeout_{4000};
  mutable std::mutex mu_;  // conns_, active_
  CopyConnections conns_{8, 4, 32};
  int max_copies_ = 32;
  int active_ = 0;  // serving threads not yet finished
  std::condition_variable idle_;
  std::mutex put_mu_;
  int listen_fd_ = -1;
  std::string address_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::atomic<int> received_{0};
  std::thread thread_;
};

// Sends the file at `path` to the server at `endpoint` (its endpoint()) as <step_name>/<basename>;
// OK once the peer stored it and its xxh64 matched. Errors name the peer.
// The whole copy ends within `timeout`; the peer's go-ahead within 10 s of it.
Status PutShardFile(const std::string& endpoint, const std::string& step_name, const std::string& path,
                    std::chrono::milliseconds timeout);

// Fetches <step_name>/<name> from the server at `endpoint` into dest_dir (created if
// missing), atomically, refusing bytes whose size or xxh64 differ from the
// expected ones. false (and nothing written) when the peer does not have it.
StatusOr<bool> FetchShardFile(const std::string& endpoint, const std::string& step_name, const std::string& name,
                              const std::string& dest_dir, uint64_t size, uint64_t xxh64,
                              std::chrono::milliseconds timeout);

// WriteFileAtomic under a name unique to this thread, then renamed into
// place: ranks of one host (processes, or threads in tests) may write the
// same file at once; the same bytes land, and no writer's rename fails.
Status WriteFileAtomicShared(const std::string& path, const std::string& data);

}  // namespace shard
