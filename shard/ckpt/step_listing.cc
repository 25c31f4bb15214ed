#include "shard/ckpt/step_listing.h"

#include "shard/common/file_util.h"
#include "shard/spec/param_layout.h"

namespace shard {

StatusOr<LlamaConfig> StepModelConfig(const Manifest& m, const std::string& step_dir) {
  const std::string where = step_dir + "/" + kCommittedFile + " model_config";
  ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfigFromHfJson(m.model_config, where));
  if (m.model_hash != config.ShapeHash())
    return DataLoss(where + ": the manifest's model_hash is not the hash of its model config's shape");
  const ParamLayout layout = ParamLayout::ForLlama(config);
  if (layout.units.size() != m.units.size())
    return DataLoss(where + ": the config makes " + std::to_string(layout.units.size()) + " units, the manifest lists " +
                    std::to_string(m.units.size()));
  for (size_t u = 0; u < m.units.size(); ++u)
    if (m.units[u].first != layout.units[u].name || m.units[u].second != layout.units[u].numel)
      return DataLoss(where + ": unit " + std::to_string(u) + " is " + layout.units[u].name + " of " +
                      std::to_string(layout.units[u].numel) + " elements by the config, " + m.units[u].first + " of " +
                      std::to_string(m.units[u].second) + " in the manifest");
  return config;
}

StepListing DescribeStep(const StepInfo& s, bool verify_checksums) {
  StepListing out;
  out.step = out.folder_step = s.step;
  out.dir = s.dir;
  out.committed = s.committed;
  if (!s.committed) {
    out.problem = "no COMMITTED (an interrupted save; never resumed from)";
    return out;
  }
  // The manifest's own figures, even for a step that fails the proof.
  auto text = ReadFileToString(s.dir + "/" + kCommittedFile);
  auto m = text.ok() ? Manifest::FromJson(*text, s.dir + "/" + kCommittedFile) : StatusOr<Manifest>(text.status());
  if (m.ok()) {
    out.step = m->step;
    out.world = m->world;
    out.files = static_cast<int>(m->files.size());
    out.strategy = m->strategy;
    for (const auto& f : m->files) out.manifest_bytes += static_cast<int64_t>(f.size);
  }
  auto r = CheckpointReader::Open(s.dir, verify_checksums);
  if (!r.ok()) {
    out.problem = r.status().message();
    return out;
  }
  auto config = StepModelConfig(r->manifest(), s.dir);
  if (!config.ok()) {
    out.problem = config.status().message();
    return out;
  }
  out.valid = true;
  return out;
}

}  // namespace shard
