#include "coordinator/ctl/queue_format.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "coordinator/jobs/job_manager.h"

namespace shardctl {

std::string QueueTable(const shardd::v1::ListJobsResponse& resp) {
  std::vector<const shardd::v1::JobStatus*> holding, waiting;
  for (const auto& j : resp.jobs()) {
    if (shardd::IsTerminal(j.state())) continue;
    if (j.queue_position() > 0) waiting.push_back(&j);
    else if (!j.placement().empty()) holding.push_back(&j);
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const auto* a, const auto* b) { return a->queue_position() < b->queue_position(); });
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof(line), "%-4s %-24s %-11s %5s  %s\n", "POS", "JOB", "STATE", "PRIO", "HOLDS / NEEDS");
  out += line;
  for (const auto* j : holding) {
    std::snprintf(line, sizeof(line), "%-4s %-24s %-11s %5d  %s\n", "-", j->id().c_str(),
                  shardd::JobStateName(j->state()).c_str(), j->priority(), j->placement().c_str());
    out += line;
  }
  for (const auto* j : waiting) {
    std::snprintf(line, sizeof(line), "%-4d %-24s %-11s %5d  %s\n", j->queue_position(), j->id().c_str(),
                  shardd::JobStateName(j->state()).c_str(), j->priority(), j->demand().c_str());
    out += line;
    if (j->state() == shardd::v1::QUEUED && !j->reason().empty()) out += std::string(41, ' ') + j->reason() + "\n";
  }
  if (holding.empty() && waiting.empty()) out += "(nothing holds or waits for this host's GPUs and CPU slots)\n";
  return out;
}

}  // namespace shardctl
