#include "shard/ckpt/memory_step_fetch.h"

#include <filesystem>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/ckpt/shard_copy.h"
#include "shard/common/checksum.h"
#include "shard/common/file_util.h"
#include "shard/common/owned_dir.h"

namespace shard {
namespace fs = std::filesystem;

StatusOr<MemoryStepAssembly> AssembleMemoryStep(const std::string& host_dir, const Manifest& manifest,
                                                const std::vector<MemoryStepSource>& sources,
                                                std::chrono::milliseconds timeout, size_t first_file) {
  MemoryStepAssembly out;
  const std::string step_name = StepDirName(manifest.step);
  out.step_dir = (fs::path(host_dir) / step_name).string();
  // The host's folder and the step's: the user's own, 0700, never a link (owned_dir.h).
  ASSIGN_OR_RETURN(OwnedDir host, OwnedDir::OpenUnderParent(host_dir, /*create=*/true));
  RETURN_IF_ERROR(host.Sub(step_name, /*create=*/true).status());
  std::error_code ec;
  const size_t n = manifest.files.size();
  for (size_t k = 0; k < n; ++k) {
    const ManifestFile& f = manifest.files[(first_file + k) % n];
    const std::string path = (fs::path(out.step_dir) / f.name).string();
    const uint64_t size = fs::file_size(path, ec);
    std::string why;  // "; "-separated: what this host holds, then each source's answer
    if (!ec && size == f.size) {
      auto h = Xxh64File(path);
      if (h.ok() && *h == f.xxh64) continue;  // this host's copy (own or a replica)
      why = "; this host's copy fails its checksum";
    } else if (!ec) {
      why = "; this host's copy has " + std::to_string(size) + " bytes, not " + std::to_string(f.size);
    }
    ec.clear();
    bool got = false;
    for (const MemoryStepSource& s : sources) {
      auto fetched = FetchShardFile(s.address, step_name, f.name, out.step_dir, f.size, f.xxh64, timeout);
      if (fetched.ok() && *fetched) {
        out.fetched.push_back(f.name + " from rank " + std::to_string(s.rank) + " on host " + s.host);
        got = true;
        break;
      }
      why += "; rank " + std::to_string(s.rank) + ": " + (fetched.ok() ? "not there" : fetched.status().message());
    }
    if (!got) {
      if (sources.empty()) why += "; no other host to ask";
      out.missing += (out.missing.empty() ? "" : ", ") + f.name + " (" + why.substr(2) + ")";
    }
  }
  if (!out.missing.empty()) return out;
  RETURN_IF_ERROR(WriteFileAtomicShared(out.step_dir + "/" + kCommittedFile, manifest.ToJson()));
  out.complete = true;
  return out;
}

Status KeepNewestMemorySteps(const std::string& host_dir, int64_t current, int keep, bool drop_newer) {
  // Deleted only inside the opened host folder (the user's own: owned_dir.h).
  auto dir = OwnedDir::OpenUnderParent(host_dir, /*create=*/false);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound) return OkStatus();
  if (!dir.ok()) return dir.status().WithContext("memory tier: no step deleted");
  ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(host_dir));
  int upto = 0;  // steps[0, upto) are at or below `current` (ListSteps: oldest first)
  while (upto < static_cast<int>(steps.size()) && steps[upto].step <= current) ++upto;
  const int older = std::max(0, upto - std::max(1, keep));
  for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
    if ((i >= older && i < upto) || (i >= upto && !drop_newer)) continue;
    RETURN_IF_ERROR(DeleteStepAt(dir->fd(), fs::path(steps[i].dir).filename().string(), steps[i].dir)
                        .WithContext("memory tier"));
  }
  return OkStatus();
}

}  // namespace shard
