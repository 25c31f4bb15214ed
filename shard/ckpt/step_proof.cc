#include "shard/ckpt/step_proof.h"

#include <algorithm>
#include <set>
#include <utility>

namespace shard {

Status ProveFileList(const Manifest& m, const std::string& where) {
  if (static_cast<int>(m.files.size()) != m.shard_count)
    return DataLoss(where + ": the manifest lists " + std::to_string(m.files.size()) + " files for " +
                    std::to_string(m.shard_count) + " shards");
  std::set<std::string> names;
  std::vector<bool> rank_seen(static_cast<size_t>(std::max(0, m.shard_count)), false);
  for (const ManifestFile& f : m.files) {
    if (!names.insert(f.name).second)
      return DataLoss(where + ": the manifest names file " + f.name + " twice (an incomplete step)");
    if (f.shard_rank < 0 || f.shard_rank >= m.shard_count)
      return DataLoss(where + ": file " + f.name + " has shard_rank " + std::to_string(f.shard_rank) +
                      ", outside [0, " + std::to_string(m.shard_count) + ")");
    if (rank_seen[f.shard_rank])
      return DataLoss(where + ": shard " + std::to_string(f.shard_rank) + " is listed twice (an incomplete step)");
    rank_seen[f.shard_rank] = true;
  }
  // Names after duplicates: a repeated entry is the likelier damage to report.
  for (const ManifestFile& f : m.files) {
    if (f.name != ShardFileName(f.shard_rank, m.shard_count))
      return DataLoss(where + ": file " + f.name + " is not named as shard " + std::to_string(f.shard_rank) + " of " +
                      std::to_string(m.shard_count) + " (" + ShardFileName(f.shard_rank, m.shard_count) + ")");
  }
  return OkStatus();
}

namespace {

// The headers' ranges of unit u tile [0, numel) exactly once.
Status ProveUnitCovered(const Manifest& m, const std::vector<ShardHeader>& headers, size_t u, const std::string& where) {
  const auto& [name, numel] = m.units[u];
  std::vector<std::pair<int64_t, int64_t>> ranges;  // begin, end
  for (const ShardHeader& h : headers)
    if (h.units[u].count > 0) ranges.emplace_back(h.units[u].begin, h.units[u].begin + h.units[u].count);
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  for (const auto& [b, e] : ranges) {
    if (b > next)
      return DataLoss(where + ": unit " + name + " elements [" + std::to_string(next) + ", " + std::to_string(b) +
                      ") are in no shard file (an incomplete step)");
    if (b < next)
      return DataLoss(where + ": unit " + name + " elements [" + std::to_string(b) + ", " +
                      std::to_string(std::min(e, next)) + ") are in two shard files");
    next = e;
  }
  if (next != numel)
    return DataLoss(where + ": unit " + name + " elements [" + std::to_string(next) + ", " + std::to_string(numel) +
                    ") are in no shard file (an incomplete step)");
  return OkStatus();
}

}  // namespace

Status ProveStepComplete(const Manifest& m, const std::vector<ShardHeader>& headers, const std::string& where) {
  RETURN_IF_ERROR(ProveFileList(m, where));
  if (headers.size() != m.files.size())
    return DataLoss(where + ": " + std::to_string(headers.size()) + " shard headers for " +
                    std::to_string(m.files.size()) + " files");
  for (size_t i = 0; i < headers.size(); ++i) {
    const ShardHeader& h = headers[i];
    const std::string file = where + "/" + m.files[i].name;
    if (h.step != m.step || h.model_hash != m.model_hash || h.units.size() != m.units.size())
      return DataLoss("checkpoint file " + file + " does not belong to this step/model (header disagrees with the manifest)");
    if (h.shard_rank != m.files[i].shard_rank || h.shard_count != m.shard_count)
      return DataLoss("checkpoint file " + file + " holds shard " + std::to_string(h.shard_rank) + " of " +
                      std::to_string(h.shard_count) + ", the manifest lists it as shard " +
                      std::to_string(m.files[i].shard_rank) + " of " + std::to_string(m.shard_count));
    for (size_t u = 0; u < h.units.size(); ++u)
      if (h.units[u].name != m.units[u].first || h.units[u].numel != m.units[u].second)
        return DataLoss("checkpoint file " + file + ": unit " + h.units[u].name + " disagrees with the manifest");
  }
  for (size_t u = 0; u < m.units.size(); ++u) RETURN_IF_ERROR(ProveUnitCovered(m, headers, u, where));
  return OkStatus();
}

}  // namespace shard
