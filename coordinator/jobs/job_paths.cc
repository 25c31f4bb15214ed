#include "coordinator/jobs/job_paths.h"

#include <filesystem>
#include <system_error>

#include "coordinator/jobs/job_manager_internal.h"

namespace shardd {
namespace fs = std::filesystem;

std::vector<JobPath> JobPaths(const shard::JobConfig& c, const std::string& workdir) {
  std::vector<JobPath> out;
  auto add = [&](const char* key, const std::string& p, bool must_exist) {
    if (!p.empty()) out.push_back({key, fs::path(internal::Resolve(workdir, p)).lexically_normal().string(), must_exist});
  };
  add("model.from_hf", c.model.from_hf, true);
  add("data.tokens", c.data.tokens, true);
  add("data.jsonl", c.data.jsonl, true);
  add("data.prepared", c.data.prepared, false);
  if (c.data.sft() && c.data.tokenizer != "byte") add("data.tokenizer", c.data.tokenizer, true);
  add("checkpoint.dir", c.checkpoint.dir, false);
  // A memory.dir the job names is confined like checkpoint.dir; the default
  // root (/dev/shm/shardd) is the coordinator's own rule, not the job's path.
  if (c.checkpoint.memory.enabled()) add("checkpoint.memory.dir", c.checkpoint.memory.dir, false);
  if (c.checkpoint.resume != "auto" && c.checkpoint.resume != "none") add("checkpoint.resume", c.checkpoint.resume, true);
  add("export.hf_dir", c.export_.hf_dir, false);
  add("eval.data", c.eval.data, true);
  return out;
}

shard::StatusOr<std::vector<std::string>> CanonicalRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (const std::string& r : roots) {
    std::error_code ec;
    const fs::path canon = fs::canonical(fs::absolute(r, ec), ec);
    if (ec || !fs::is_directory(canon, ec))
      return shard::InvalidArgument("--allowed-root " + r + ": not an existing directory");
    out.push_back(canon.string());
  }
  return out;
}

namespace {

// The deepest existing ancestor made canonical, with the rest appended:
// resolves symlinks wherever they already are, and ".." everywhere.
fs::path Canonical(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : c.lexically_normal();
}

}  // namespace

bool IsInside(const std::string& path, const std::string& root) {
  const fs::path p = Canonical(path);
  const fs::path r = fs::path(root).lexically_normal();
  auto pi = p.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri, ++pi) {
    if (ri->empty()) continue;  // a trailing separator ("/data/")
    if (pi == p.end() || *pi != *ri) return false;
  }
  return true;
}

shard::Status CheckConfined(const std::string& src, const std::string& workdir, const std::vector<JobPath>& paths,
                            const std::vector<std::string>& roots) {
  if (roots.empty()) return shard::OkStatus();
  std::string listed;
  for (const std::string& r : roots) listed += (listed.empty() ? "" : ", ") + r;
  auto inside_any = [&](const std::string& p) {
    for (const std::string& r : roots)
      if (IsInside(p, r)) return true;
    return false;
  };
  if (!inside_any(workdir))
    return shard::PermissionDenied(src + ": the job's workdir " + workdir +
                                   " is outside the coordinator's allowed roots (" + listed + ")");
  for (const JobPath& jp : paths)
    if (!inside_any(jp.path))
      return shard::PermissionDenied(src + ": " + jp.key + ": " + jp.path +
                                     " is outside the coordinator's allowed roots (" + listed + ")");
  return shard::OkStatus();
}

}  // namespace shardd
