#include "coordinator/launchers/kubernetes/k8s_status.h"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "coordinator/launchers/kubernetes/k8s_manifests.h"

namespace shardd::k8s {

namespace {

using Json = nlohmann::json;

// Type-checked field access: API objects from a cluster are input, never
// trusted to have the shape the reference says.
const Json* Field(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string Str(const Json& j, const char* key) {
  const Json* f = Field(j, key);
  return f && f->is_string() ? f->get<std::string>() : std::string();
}

int Int(const Json& j, const char* key) {
  const Json* f = Field(j, key);
  return f && f->is_number_integer() ? f->get<int>() : 0;
}

const Json& Obj(const Json& j, const char* key) {
  static const Json kEmpty = Json::object();
  const Json* f = Field(j, key);
  return f && f->is_object() ? *f : kEmpty;
}

const Json& Arr(const Json& j, const char* key) {
  static const Json kEmpty = Json::array();
  const Json* f = Field(j, key);
  return f && f->is_array() ? *f : kEmpty;
}

// The condition of this type that is True, or nullptr.
const Json* TrueCondition(const Json& status, const std::string& type) {
  for (const Json& c : Arr(status, "conditions"))
    if (Str(c, "type") == type && Str(c, "status") == "True") return &c;
  return nullptr;
}

std::string Join(const std::string& reason, const std::string& message) {
  if (message.empty()) return reason;
  if (reason.empty()) return message;
  return reason + ": " + message;
}

JobState ParseJob(const Json& j) {
  JobState s;
  s.found = true;
  s.name = Str(Obj(j, "metadata"), "name");
  s.deleting = Field(Obj(j, "metadata"), "deletionTimestamp") != nullptr;
  const Json& st = Obj(j, "status");
  s.active = Int(st, "active");
  s.succeeded = Int(st, "succeeded");
  s.failed = Int(st, "failed");
  s.complete = TrueCondition(st, "Complete") != nullptr;
  const Json* f = TrueCondition(st, "Failed");
  if (!f) f = TrueCondition(st, "FailureTarget");  // 1.31+: set before the pods are gone
  if (f) {
    s.failed_condition = true;
    s.failed_reason = Str(*f, "reason");
    s.failed_message = Str(*f, "message");
  }
  return s;
}

PodState ParsePod(const Json& p) {
  PodState s;
  const Json& meta = Obj(p, "metadata");
  s.name = Str(meta, "name");
  s.deleting = Field(meta, "deletionTimestamp") != nullptr;
  std::string idx = Str(Obj(meta, "annotations"), "batch.kubernetes.io/job-completion-index");
  if (idx.empty()) idx = Str(Obj(meta, "labels"), "batch.kubernetes.io/job-completion-index");
  if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos) s.index = std::atoi(idx.c_str());
  const Json& st = Obj(p, "status");
  s.phase = Str(st, "phase");
  s.reason = Str(st, "reason");
  s.message = Str(st, "message");
  for (const Json& c : Arr(st, "conditions")) {
    const std::string type = Str(c, "type");
    if (type == "DisruptionTarget" && Str(c, "status") == "True") s.disruption = Join(Str(c, "reason"), Str(c, "message"));
    if (type == "PodScheduled" && Str(c, "status") == "False" && Str(c, "reason") == "Unschedulable")
      s.unschedulable = Str(c, "message").empty() ? "Unschedulable" : Str(c, "message");
  }
  const Json* chosen = nullptr;
  for (const Json& cs : Arr(st, "containerStatuses")) {
    if (!chosen) chosen = &cs;
    if (Str(cs, "name") == kContainerName) chosen = &cs;
  }
  if (chosen) {
    const Json& state = Obj(*chosen, "state");
    if (const Json* t = Field(state, "terminated"); t && t->is_object()) {
      s.terminated = true;
      s.exit_code = Int(*t, "exitCode");
      s.term_signal = Int(*t, "signal");
      s.term_reason = Str(*t, "reason");
      s.term_message = Str(*t, "message");
    } else if (const Json* w = Field(state, "waiting"); w && w->is_object()) {
      s.waiting_reason = Str(*w, "reason");
      s.waiting_message = Str(*w, "message");
    }
  }
  return s;
}

bool IsImageProblem(const std::string& waiting_reason) {
  static const char* kReasons[] = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                                   "CreateContainerConfigError", "CreateContainerError", "RunContainerError"};
  for (const char* r : kReasons)
    if (waiting_reason == r) return true;
  return false;
}

std::string PodLabel(const PodState& p) {
  return "pod " + p.name + (p.index >= 0 ? " (index " + std::to_string(p.index) + ")" : "");
}

// What went wrong with a failed (or failing) pod, or "" if nothing is known.
std::string PodFailure(const PodState& p) {
  if (p.reason == "Evicted") return PodLabel(p) + " was evicted: " + (p.message.empty() ? "no message" : p.message);
  if (p.terminated && p.term_reason == "OOMKilled")
    return PodLabel(p) + " was OOMKilled (out of memory; raise resources.kubernetes.memory), exit code " +
           std::to_string(p.exit_code);
  if (!p.disruption.empty()) return PodLabel(p) + " was disrupted: " + p.disruption;
  if (p.terminated && p.exit_code != 0)
    return PodLabel(p) + " exited with code " + std::to_string(p.exit_code) +
           (p.term_reason.empty() || p.term_reason == "Error" ? "" : " (" + Join(p.term_reason, p.term_message) + ")");
  if (p.phase == "Failed") return PodLabel(p) + " failed: " + Join(p.reason, p.message);
  return "";
}

}  // namespace

shard::StatusOr<AttemptObjects> ParseAttemptObjects(const std::string& kubectl_json) {
  Json doc = Json::parse(kubectl_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return shard::InvalidArgument("kubectl get printed no JSON object (" + std::to_string(kubectl_json.size()) +
                                  " bytes): " + kubectl_json.substr(0, 120));
  std::vector<const Json*> items;
  if (Str(doc, "kind") == "List" || Str(doc, "kind").ends_with("List")) {
    for (const Json& it : Arr(doc, "items")) items.push_back(&it);
  } else {
    items.push_back(&doc);
  }
  AttemptObjects out;
  for (const Json* it : items) {
    const std::string kind = Str(*it, "kind");
    if (kind == "Job") {
      if (out.job.found)
        return shard::InvalidArgument("kubectl get returned two Jobs for one attempt (" + out.job.name + ", " +
                                      Str(Obj(*it, "metadata"), "name") + ")");
      out.job = ParseJob(*it);
    } else if (kind == "Pod") {
      out.pods.push_back(ParsePod(*it));
    } else {
      return shard::InvalidArgument("kubectl get returned an unexpected " + (kind.empty() ? "object" : kind));
    }
  }
  std::sort(out.pods.begin(), out.pods.end(),
            [](const PodState& a, const PodState& b) { return a.index != b.index ? a.index < b.index : a.name < b.name; });
  return out;
}

Verdict Judge(const AttemptObjects& objs, const std::string& name) {
  Verdict v;
  for (const PodState& p : objs.pods)
    if (p.phase != "Succeeded" && p.phase != "Failed") ++v.live_pods;
  if (!objs.job.found) {
    v.phase = Verdict::kGone;
    v.detail = "kubernetes job " + name + " is gone";
    return v;
  }
  const JobState& job = objs.job;
  if (job.complete) {
    v.phase = Verdict::kSucceeded;
    v.exit_code = 0;
    v.detail = "kubernetes job " + name + " completed";
    return v;
  }
  // Failures: bad input first (not retried), then the first pod that failed.
  const PodState* culprit = nullptr;
  for (const PodState& p : objs.pods)
    if (p.terminated && p.exit_code == 2) {
      culprit = &p;
      break;
    }
  if (!culprit)
    for (const PodState& p : objs.pods)
      if (p.phase == "Failed" || p.reason == "Evicted" || (p.terminated && p.exit_code != 0) ||
          (p.deleting && !p.disruption.empty())) {
        culprit = &p;
        break;
      }
  if (culprit || job.failed_condition) {
    v.phase = Verdict::kFailed;
    std::string what = culprit ? PodFailure(*culprit) : "";
    if (culprit && culprit->terminated && culprit->exit_code != 0) {
      v.exit_code = culprit->exit_code;
      if (culprit->term_signal > 0) v.signal = culprit->term_signal;
      else if (culprit->exit_code > 128 && culprit->exit_code < 128 + 65) v.signal = culprit->exit_code - 128;
      if (v.signal != 0) v.exit_code = 0;  // RankExit: the code is valid only without a signal
    }
    v.detail = "kubernetes job " + name + ": " + (what.empty() ? "failed" : what);
    if (job.failed_condition) v.detail += "; job condition " + Join(job.failed_reason, job.failed_message);
    if (v.exit_code == 2 && v.signal == 0) v.detail += " (bad input: not retried)";
    return v;
  }
  if (job.deleting) {
    v.phase = Verdict::kFailed;
    v.detail = "kubernetes job " + name + " is being deleted (not by this coordinator?)";
    return v;
  }
  bool any_running = false;
  for (const PodState& p : objs.pods) {
    if (p.phase == "Running") any_running = true;
    if (IsImageProblem(p.waiting_reason)) {
      v.stuck_kind = "image";
      v.detail = PodLabel(p) + " cannot start: " + Join(p.waiting_reason, p.waiting_message);
      break;
    }
    if (!p.unschedulable.empty() && v.stuck_kind.empty()) {
      v.stuck_kind = "unschedulable";
      v.detail = PodLabel(p) + " is unschedulable: " + p.unschedulable;
    }
  }
  v.phase = any_running && v.stuck_kind.empty() ? Verdict::kRunning : Verdict::kPending;
  return v;
}

}  // namespace shardd::k8s
