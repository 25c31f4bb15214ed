// The health verdicts kept for one job (coordinator/health/ holds the rules):
// stragglers, the straggler action, the last stall's account and a failure
// held back while its likely cause (a peer's exit) may still be named. The
// gateway's heartbeat path and the control loop change it. Plain data,
// guarded by JobTable's lock like the rest of the Job.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/health/straggler_detector.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd {

struct JobHealth {
  // Every rank's compute per step (health:), for the attempt stragglers_attempt.
  StragglerDetector stragglers;
  int stragglers_attempt = 0;
  // health.straggler_action: restart decided on the heartbeat path; the
  // control loop restarts the attempt with this reason ("" = none due).
  std::string straggler_restart;
  // The flight recorder's account of the last stall (one per attempt); stored
  // with the job (JobRecord::stall), so status shows it after a restart.
  v1::StallCause stall;
  // A rank reported a failure that may be a symptom (a peer died): held
  // briefly so a rank's exit, the likely cause, is named instead.
  std::string pending_failure;
  int64_t pending_deadline_ms = 0;
};

}  // namespace shardd
