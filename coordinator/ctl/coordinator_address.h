// shardctl's --coordinator: HOST:PORT (a name, an IPv4 address or [IPv6]),
// checked before anything dials it, so a typo is a usage error (exit 2) and
// never taken for "no coordinator here" (which would show a read-only
// offline view of the state dir, or start an embedded coordinator).
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardctl {

// OK, or INVALID_ARGUMENT naming the flag and what is wrong (no port, a port
// outside 1..65535, no host). gRPC target URIs ("dns:///h:p", "unix:/path",
// "ipv4:...") are left to gRPC.
shard::Status CheckCoordinatorAddress(const std::string& address);

}  // namespace shardctl
