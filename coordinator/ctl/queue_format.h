// How `shardctl queue` prints the local host's queue: the jobs holding
// devices, then the waiting ones in the order they will start, each with
// its priority, what it needs or holds, and why it waits. A pure function of
// the coordinator's job list (JobStatus carries placement and queue position).
#pragma once

#include <string>

#include "shardd/v1/coordinator.pb.h"

namespace shardctl {

std::string QueueTable(const shardd::v1::ListJobsResponse& jobs);

}  // namespace shardctl
