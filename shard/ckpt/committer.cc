#include "shard/ckpt/committer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "shard/ckpt/catalog.h"
#include "shard/ckpt/checkpoint_tier.h"
#include "shard/common/checksum.h"
#include "shard/common/fault.h"
#include "shard/common/file_util.h"
#include "shard/common/json_int.h"
#include "shard/common/logging.h"

namespace shard {
namespace fs = std::filesystem;

Status WriteShardReport(const std::string& step_dir, const WrittenFile& file, int shard_rank) {
  nlohmann::json j{{"name", file.name}, {"shard_rank", shard_rank}, {"size", file.size},
                   {"xxh64", HashToHex(file.xxh64)}};
  return WriteFileAtomic(step_dir + "/" + file.name + ".report", j.dump() + "\n");
}

StatusOr<std::vector<ManifestFile>> ReadShardReports(const std::string& step_dir) {
  std::vector<ManifestFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(step_dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".report") != 0) continue;
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(e.path().string()));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return DataLoss(e.path().string() + ": report is not JSON");
    try {
      ManifestFile f;
      f.name = j.at("name").get<std::string>();
      f.shard_rank = JsonInt<int>(j.at("shard_rank"), "shard_rank");
      f.size = JsonInt<uint64_t>(j.at("size"), "size");
      auto h = HashFromHex(j.at("xxh64").get<std::string>());
      if (!h.ok()) return h.status().WithContext(e.path().string());
      f.xxh64 = *h;
      out.push_back(std::move(f));
    } catch (const nlohmann::json::exception& ex) {
      return DataLoss(e.path().string() + ": malformed report: " + ex.what());
    }
  }
  if (ec) return NotFound("cannot list " + step_dir + ": " + ec.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.shard_rank < b.shard_rank; });
  return out;
}

Status CommitStep(const std::string& step_dir, Manifest base, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // Only reports of this layout count: a crashed earlier attempt at the same
  // step may have left reports of another shard count (other file names).
  std::vector<ManifestFile> mine(base.shard_count);
  std::vector<bool> have(base.shard_count, false);
  int count = 0;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<ManifestFile> reports, ReadShardReports(step_dir));
    for (auto& f : reports) {
      if (f.shard_rank < 0 || f.shard_rank >= base.shard_count ||
          f.name != ShardFileName(f.shard_rank, base.shard_count) || have[f.shard_rank])
        continue;
      have[f.shard_rank] = true;
      mine[f.shard_rank] = std::move(f);
      ++count;
    }
    if (count == base.shard_count) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::string missing;
      for (int r = 0; r < base.shard_count; ++r)
        if (!have[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%.1f", timeout.count() / 1000.0);
      return DeadlineExceeded("commit of " + step_dir + ": only " + std::to_string(count) + " of " +
                              std::to_string(base.shard_count) + " shards reported within " + waited +
                              " s; missing shards " + missing + " (did a writer die?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  base.files = std::move(mine);
  MaybeFault("ckpt_before_commit", base.step);
  return WriteFileAtomic(step_dir + "/" + kCommittedFile, base.ToJson());
}

Status ApplyRetention(const std::string& job_dir, int keep_last, const std::string& run_fingerprint, int dir_fd) {
  ASSIGN_OR_RETURN(std::vector<StepInfo> steps, ListSteps(job_dir));
  // Only this run's committed steps count and may go: another run's steps in
  // the same directory are never deleted. A manifest that does not parse is
  // a damaged step whoever wrote it: treated as this run's.
  std::vector<const StepInfo*> committed;
  std::map<int64_t, bool> others;
  for (const auto& s : steps) {
    if (!s.committed) continue;
    auto text = ReadFileToString(s.dir + "/" + kCommittedFile);
    auto m = text.ok() ? Manifest::FromJson(*text, s.dir) : StatusOr<Manifest>(text.status());
    if (m.ok() && m->run_fingerprint != run_fingerprint) {
      others[s.step] = true;
      continue;
    }
    committed.push_back(&s);
  }
  if (committed.empty()) return OkStatus();
  const int64_t newest = committed.back()->step;
  const size_t keep = static_cast<size_t>(std::max(1, keep_last));
  std::map<int64_t, bool> keep_step = others;
  for (size_t i = committed.size() > keep ? committed.size() - keep : 0; i < committed.size(); ++i)
    keep_step[committed[i]->step] = true;
  // Also the newest committed step that still opens (files present with their
  // sizes, headers agreeing): if the newest commits are damaged, the newest
  // good one must survive. Checksums are not re-read here (a full read per save).
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (CheckpointReader::Open((*it)->dir, /*verify_checksums=*/false).ok()) {
      keep_step[(*it)->step] = true;
      break;
    }
  }
  // Deleted inside the opened folder: a job_dir swapped for a link meanwhile
  // leads nowhere else.
  const int own_fd = dir_fd >= 0 ? -1 : ::open(job_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 && own_fd < 0) return DataLoss("retention: cannot open " + job_dir + ": " + std::strerror(errno));
  const int at = dir_fd >= 0 ? dir_fd : own_fd;
  Status out = OkStatus();
  for (const auto& s : steps) {
    if (s.step >= newest || keep_step.count(s.step)) continue;
    MaybeFault("ckpt_during_retention", newest);
    // A link is removed as a link, never through it: its target is a step
    // folder of this directory listed (and kept or deleted) on its own.
    out = DeleteStepAt(at, fs::path(s.dir).filename().string(), s.dir).WithContext("retention");
    if (!out.ok()) break;
  }
  if (own_fd >= 0) ::close(own_fd);
  RETURN_IF_ERROR(out);
  return FsyncDir(job_dir);
}

}  // namespace shard
