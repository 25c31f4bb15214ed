// The files a job names, and the coordinator's confinement of them to allowed
// roots (`shardd --allowed-root DIR`, repeatable). Every path key of the job
// file is resolved against the submitter's workdir; with roots configured, the
// workdir and each of those paths must lie inside one of them once symlinks
// and ".." are resolved (the deepest existing ancestor is canonicalised, so a
// path that does not exist yet — a checkpoint or export folder — is judged by
// where it would be created). Pure functions over the filesystem, tested alone.
//
// What this does not confine: shell lines a job asks for (resources.slurm.setup,
// sbatch_args) and the container image of a Kubernetes job — those run as the
// job, and the admin token is what guards who may submit them.
#pragma once

#include <string>
#include <vector>

#include "shard/common/status.h"
#include "shard/spec/job_config.h"

namespace shardd {

struct JobPath {
  std::string key;   // the dotted job-file key, e.g. "data.jsonl"
  std::string path;  // absolute, lexically normal
  bool must_exist = false;  // an input the job reads (else written by the job)
};

// Every path the job file names, resolved against `workdir` (absolute). Keys
// that hold a name rather than a path (data.tokenizer: byte; checkpoint.resume:
// auto | none) are left out, and so is a tokenizer a token-file job never reads.
std::vector<JobPath> JobPaths(const shard::JobConfig& c, const std::string& workdir);

// The roots made canonical (symlinks resolved); each must be an existing
// directory, else INVALID_ARGUMENT naming it.
shard::StatusOr<std::vector<std::string>> CanonicalRoots(const std::vector<std::string>& roots);

// Whether `path` (absolute) is `root` or inside it after resolving symlinks
// and "..", comparing whole components (/data2 is not inside /data). `root`
// must already be canonical (CanonicalRoots).
bool IsInside(const std::string& path, const std::string& root);

// OK when `roots` is empty (no confinement) or when `workdir` and every path
// lie inside one of them; else PERMISSION_DENIED naming the key, the path and
// the roots. `src` prefixes the message (the job file's name).
shard::Status CheckConfined(const std::string& src, const std::string& workdir, const std::vector<JobPath>& paths,
                            const std::vector<std::string>& roots);

}  // namespace shardd
