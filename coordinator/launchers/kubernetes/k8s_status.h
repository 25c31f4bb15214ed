// Reads what `kubectl get jobs.batch,pods -l <attempt selector> -o json`
// printed (a v1 List of one batch/v1 Job and its pods) and judges the
// attempt: still pending, running, succeeded, or failed and why. Pure, so the
// rules are tested on recorded API objects alone.
//
// The rules, in order: the Job's Complete condition is success; any pod whose
// worker container exited with code 2 is the worker's "bad input" (exit code
// 2, not retried by the coordinator); any failed pod (evicted, OOMKilled,
// exited non-zero, refused by the kubelet) or the Job's Failed or
// FailureTarget condition is a failure named after the pod that caused it;
// pods that cannot start (image pull errors, missing Secret/ConfigMap,
// Unschedulable) are reported as waiting with the reason, and the launcher
// decides how long to wait.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardd::k8s {

struct PodState {
  std::string name;
  int index = -1;                   // the completion index (-1 = not said)
  std::string phase;                // Pending, Running, Succeeded, Failed, Unknown
  std::string reason, message;      // status.reason ("Evicted") and status.message
  bool deleting = false;            // metadata.deletionTimestamp is set
  std::string disruption;           // the DisruptionTarget condition: "EvictionByEvictionAPI: ..."
  std::string unschedulable;        // the PodScheduled=False message when the reason is Unschedulable
  // The worker container (or the first one).
  bool terminated = false;
  int exit_code = 0;
  int term_signal = 0;              // state.terminated.signal, when the runtime said
  std::string term_reason;          // OOMKilled, Error, Completed, ContainerCannotRun
  std::string term_message;
  std::string waiting_reason, waiting_message;  // ImagePullBackOff, CreateContainerConfigError, ...
};

struct JobState {
  bool found = false;
  std::string name;
  bool deleting = false;
  int active = 0, succeeded = 0, failed = 0;
  bool complete = false;
  bool failed_condition = false;    // Failed or FailureTarget is True
  std::string failed_reason, failed_message;  // BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy
};

struct AttemptObjects {
  JobState job;
  std::vector<PodState> pods;
};

// INVALID_ARGUMENT when the text is not a List (or single object) of Jobs and Pods.
shard::StatusOr<AttemptObjects> ParseAttemptObjects(const std::string& kubectl_json);

struct Verdict {
  enum Phase { kPending, kRunning, kSucceeded, kFailed, kGone };
  Phase phase = kPending;
  int exit_code = -1;  // kSucceeded: 0; kFailed: the container's code, or -1 when no container said
  int signal = 0;      // kFailed: the signal the runtime named (or 128+N exit codes), else 0
  std::string detail;  // kFailed: the reason in a person's words; kPending: why it waits, if known
  // Pods that cannot start without a person fixing something: "image" (pull
  // errors, bad image name, missing Secret or ConfigMap) or "unschedulable".
  std::string stuck_kind;
  int live_pods = 0;   // pods not yet Succeeded or Failed
};

// `name` is the attempt's object name (for messages). A missing Job is kGone.
Verdict Judge(const AttemptObjects& objs, const std::string& name);

}  // namespace shardd::k8s
