// Who keeps the partner copy of a rank's memory-tier shard (checkpoint.memory.
// replicas: 1; docs/control-plane.md, "Checkpoint tiers"), and whom a host
// asks for a memory step it lacks. Pure functions of the ranks' hosts.
//
// Hosts are ordered by their lowest rank; a rank's local index is its place
// among its host's ranks (by rank). Rank r on host h has as partner the rank
// of the next host in that ring (h+1 mod hosts) with the same local index,
// modulo that host's rank count (hosts may hold different counts). With
// every rank on one host there is no partner (the host's memory is one fate).
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace shard {

// partner[r] for every rank: a rank on another host, or -1 (one host).
std::vector<int> PartnerRanks(const std::vector<std::string>& host_of_rank);

// The ranks `me` asks for memory-step files its host lacks: one rank per other
// host, its own partner's host first, then the others in ring order from the
// next host. Empty when every rank is on `me`'s host.
std::vector<int> HostsToAsk(const std::vector<std::string>& host_of_rank, int me);

// A host name as one path component of the memory tier's job folder
// ("10.213.0.2" -> "host-10.213.0.2"): characters outside [A-Za-z0-9._-]
// become '_', so a host name never leaves the folder.
std::string MemoryHostFolder(const std::string& host);

}  // namespace shard
