// The peer an address counts as, for per-peer connection caps (the
// coordinator's HTTP server, the partner-copy server): its IP address, IPv4
// in an IPv4-mapped IPv6 address as plain IPv4, and every loopback address
// (all of 127.0.0.0/8, ::1 and ::ffff:127.x.y.z) one peer, "loopback" — a
// local client can bind any of 127.0.0.1..127.255.255.254, so counting each
// as its own peer would let it multiply its share.
#pragma once

#include <sys/socket.h>

#include <string>

namespace shard {

// From text: "127.0.0.2", "::1", "[::ffff:10.0.0.7]" (brackets allowed). Text
// that is no address comes back as it is.
std::string PeerOfAddress(const std::string& address);

// From a socket address (sockaddr_in or sockaddr_in6); "unknown" for another family.
std::string PeerOfSockaddr(const sockaddr_storage& addr);

}  // namespace shard
