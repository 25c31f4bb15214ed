// shardctl render k8s FILE.yaml: prints the Kubernetes objects the
// coordinator's kubernetes launcher would apply for a job (a Secret, a
// headless Service, an Indexed Job), byte for byte the same renderer, with the
// attempt's worker token replaced by a marked placeholder. Offline: reads the
// job file only, talks to no cluster and no coordinator.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shardctl {

struct RenderOptions {
  std::string target;              // "k8s"
  std::string job_file;
  std::vector<std::string> sets;   // --set key=value overrides
  std::string job_id;              // "" = <name>-1
  int attempt = 1;
  std::string coordinator;         // the address pods dial ("" = resources.kubernetes.coordinator, else shardd:7070)
  std::string workdir;             // "" = this directory when it is under mount_path, else mount_path
  std::string state_dir;           // the coordinator's --state-dir ("" = <mount_path>/state), for the log dir
  std::string worker_command = "shardd-worker";
};

// Prints the manifests to stdout. INVALID_ARGUMENT for a bad job file or
// settings the renderer refuses (exit 2).
shard::Status RunRender(const RenderOptions& o);

}  // namespace shardctl
