#include "coordinator/host/probed_cluster.h"

#include <mutex>

#include "coordinator/launchers/command.h"

namespace shardd {
namespace {

// The worker's answer: its GPUs, or why there are none (its stderr line).
shard::StatusOr<std::vector<shard::plan::ProbedGpu>> RunProbe(const std::string& worker_bin) {
  CommandOptions opts;
  opts.timeout_s = 120;  // a first CUDA context on a busy node can take tens of seconds
  ASSIGN_OR_RETURN(CommandResult r, RunCommand({worker_bin, "--probe", "--json"}, opts));
  if (r.exit_code == 3) {  // the worker's "no GPU here": its one-line reason
    std::string line = r.err.substr(0, r.err.find('\n'));
    if (line.rfind("shardd-worker: ", 0) == 0) line.erase(0, 15);
    return shard::Unavailable(line.empty() ? "no GPU" : line);
  }
  if (!r.ok()) return shard::Unavailable(r.Explain(worker_bin + " --probe"));
  return shard::plan::ProbedGpusFromJson(r.out);
}

// Once per process: a CUDA runtime start is not free.
const shard::StatusOr<std::vector<shard::plan::ProbedGpu>>& CachedProbe(const std::string& worker_bin) {
  static std::once_flag once;
  static shard::StatusOr<std::vector<shard::plan::ProbedGpu>> probe = shard::Unavailable("not probed");
  std::call_once(once, [&] { probe = RunProbe(worker_bin); });
  return probe;
}

}  // namespace

int ProbedLocalGpuCount(const std::string& worker_bin, std::string* why) {
  const auto& probe = CachedProbe(worker_bin);
  if (!probe.ok()) {
    *why = probe.status().message();
    return 0;
  }
  return static_cast<int>(probe->size());
}

shard::StatusOr<std::vector<std::string>> ProbedLocalGpuIds(const std::string& worker_bin, bool fresh) {
  shard::StatusOr<std::vector<shard::plan::ProbedGpu>> probe =
      fresh ? RunProbe(worker_bin) : CachedProbe(worker_bin);
  if (!probe.ok()) return probe.status();
  std::vector<std::string> ids;
  for (const shard::plan::ProbedGpu& g : *probe) ids.push_back(g.pci_bus_id);
  return ids;
}

std::optional<shard::plan::ClusterSpec> ProbedLocalCluster(const shard::plan::HardwareCatalog& catalog,
                                                           const std::string& worker_bin, std::string* why) {
  const auto& probe = CachedProbe(worker_bin);
  if (!probe.ok()) {
    *why = probe.status().message();
    return std::nullopt;
  }
  auto cluster = shard::plan::ClusterFromProbe(catalog, *probe);
  if (!cluster.ok()) {
    *why = cluster.status().message();
    return std::nullopt;
  }
  return *cluster;
}

}  // namespace shardd
