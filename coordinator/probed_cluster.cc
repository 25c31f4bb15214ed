#include "coordinator/probed_cluster.h"

#include <mutex>

#include "shard/backend/hardware_probe.h"

namespace shardd {

std::optional<shard::plan::ClusterSpec> ProbedLocalCluster(const shard::plan::HardwareCatalog& catalog,
                                                           std::string* why) {
  static std::once_flag once;
  static shard::StatusOr<shard::HardwareProbe> probe = shard::Unavailable("not probed");
  std::call_once(once, [] { probe = shard::ProbeHardware(); });
  if (!probe.ok()) {
    *why = probe.status().message();
    return std::nullopt;
  }
  std::vector<shard::plan::ProbedGpu> gpus;
  for (const shard::GpuInfo& g : probe->gpus) {
    shard::plan::ProbedGpu p;
    p.name = g.name;
    p.memory_gib = static_cast<double>(g.total_bytes) / (1024.0 * 1024.0 * 1024.0);
    for (const shard::PeerLink& l : probe->links)
      if (l.a == g.index && l.kind == "nvlink") p.nvlink_to_peers = true;
    gpus.push_back(p);
  }
  auto cluster = shard::plan::ClusterFromProbe(catalog, gpus);
  if (!cluster.ok()) {
    *why = cluster.status().message();
    return std::nullopt;
  }
  return *cluster;
}

}  // namespace shardd
