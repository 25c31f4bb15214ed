// Renders one attempt as Kubernetes objects: a Secret with the attempt's
// worker token, a headless Service for stable pod DNS names, and an Indexed
// Job with one pod per node (completions = parallelism = nodes). Pure: the
// same request gives the same bytes, which is what `shardctl render k8s`
// prints and what the launcher applies.
//
// Each pod runs `shardd-worker --coordinator --job --attempt --nproc-per-node
// --hostname $POD_IP` from the job's workdir on the shared claim; the worker
// forks nproc local workers with rank = JOB_COMPLETION_INDEX * nproc + local.
// The pod's output goes to its stdout (kubectl logs) and, when the log dir is
// on the claim, to <log_dir>/pod_<index>.log with rank_<r>.log symlinks for
// the pod's ranks, which is what `shardctl logs` reads.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/launchers/launcher.h"

namespace shardd::k8s {

struct ManifestOptions {
  std::string worker_command = "shardd-worker";  // found on the image's PATH
  // Writes a marked placeholder instead of the token (shardctl render): a
  // printed manifest never carries a real credential.
  bool redact_token = false;
};

inline constexpr const char* kTokenPlaceholder = "REDACTED-the-coordinator-puts-a-fresh-token-here-per-attempt";
inline constexpr const char* kContainerName = "worker";
inline constexpr const char* kTokenKey = "token";

struct Manifests {
  std::string name;        // of the Job, the Service and the Secret
  std::string namespace_;
  nlohmann::ordered_json secret, service, job;
  // The three as one multi-document YAML stream, Secret first (the pods
  // reference it), for `kubectl apply -f -`.
  std::string Yaml() const;
};

// INVALID_ARGUMENT naming the resources.kubernetes key for bad settings
// (invalid label keys, a workdir outside mount_path, reserved env names).
shard::StatusOr<Manifests> RenderManifests(const LaunchRequest& req, const ManifestOptions& opts = {});

// The bash script each pod's container runs (see above); exposed for tests
// that run it with a stand-in worker.
std::string PodScript(const std::string& worker_command);

}  // namespace shardd::k8s
