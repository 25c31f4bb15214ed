#include "coordinator/launchers/slurm/slurm_status.h"

#include <cstdlib>
#include <sstream>

namespace shardd {
namespace {

// "2:15" → {2, 15}
void ParseExitCode(const std::string& v, SlurmJobInfo* info) {
  const size_t colon = v.find(':');
  info->exit_code = std::atoi(v.substr(0, colon).c_str());
  info->signal = colon == std::string::npos ? 0 : std::atoi(v.substr(colon + 1).c_str());
}

}  // namespace

shard::StatusOr<SlurmJobInfo> ParseScontrolJob(const std::string& text) {
  SlurmJobInfo info;
  bool have_state = false;
  std::istringstream in(text);
  std::string field;
  while (in >> field) {
    const size_t eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    if (key == "JobState") {
      info.state = value;
      have_state = true;
    } else if (key == "Reason") {
      info.reason = value;
    } else if (key == "ExitCode") {
      ParseExitCode(value, &info);
    } else if (key == "Restarts") {
      info.restarts = std::atoi(value.c_str());
    }
  }
  if (!have_state) {
    std::string first = text.substr(0, text.find('\n'));
    return shard::InvalidArgument("scontrol show job: no JobState in '" + first.substr(0, 200) + "'");
  }
  return info;
}

shard::StatusOr<SlurmJobInfo> ParseSacctJob(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  const size_t bar = line.find('|');
  if (line.empty() || bar == std::string::npos)
    return shard::NotFound("sacct knows no such job ('" + line.substr(0, 200) + "')");
  SlurmJobInfo info;
  info.state = line.substr(0, bar);
  const size_t space = info.state.find(' ');  // "CANCELLED by 0"
  if (space != std::string::npos) {
    info.reason = info.state.substr(space + 1);
    info.state.resize(space);
  }
  ParseExitCode(line.substr(bar + 1), &info);
  return info;
}

bool SlurmStateFinal(const std::string& s) {
  return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "NODE_FAIL" ||
         s == "PREEMPTED" || s == "OUT_OF_MEMORY" || s == "BOOT_FAIL" || s == "DEADLINE" || s == "SPECIAL_EXIT" ||
         s == "REVOKED";
}

bool SlurmStateActive(const std::string& s) {
  return s == "PENDING" || s == "RUNNING" || s == "CONFIGURING" || s == "COMPLETING" || s == "SUSPENDED" ||
         s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED" || s == "RESIZING" || s == "SIGNALING" ||
         s == "STAGE_OUT" || s == "STOPPED" || s == "RESV_DEL_HOLD";
}

}  // namespace shardd
