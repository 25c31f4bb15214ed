#include "shard/backend/hardware_probe.h"

#include <cstdio>

#include "shard/config.h"
#if SHARDD_CUDA_ENABLED
#include "shard/backend/cuda/cuda_backend.h"
#endif

namespace shard {

std::string HardwareProbe::ToString() const {
  std::string s = "CUDA driver " + CudaVersionString(driver_version) + ", runtime " +
                  CudaVersionString(runtime_version) + ", " + std::to_string(gpus.size()) + " GPU(s)\n";
  char line[512];
  for (const GpuInfo& g : gpus) {
    std::snprintf(line, sizeof line,
                  "gpu %d: %s  compute capability %d.%d  memory %.1f GiB (%.1f GiB free)  %d SMs  bf16 %s  "
                  "tf32 %s  pci %s\n",
                  g.index, g.name.c_str(), g.cc_major, g.cc_minor, g.total_bytes / 1073741824.0,
                  g.free_bytes / 1073741824.0, g.sm_count, g.bf16 ? "yes" : "no", g.tf32 ? "yes" : "no",
                  g.pci_bus_id.c_str());
    s += line;
  }
  for (const PeerLink& l : links) {
    if (l.a > l.b) continue;  // links are symmetric in practice; print each pair once
    std::snprintf(line, sizeof line, "link %d<->%d: %s (peer access %s, native atomics %s, performance rank %d)\n",
                  l.a, l.b, l.kind.c_str(), l.peer_access ? "yes" : "no", l.native_atomics ? "yes" : "no",
                  l.performance_rank);
    s += line;
  }
  if (gpus.size() < 2) s += "links: a single GPU, no peers\n";
  return s;
}

std::string HardwareProbe::Brief() const {
  if (gpus.empty()) return "";
  const GpuInfo& g = gpus[0];
  std::string link = gpus.size() < 2 ? "" : ", pcie";
  for (const PeerLink& l : links)
    if (l.kind == "nvlink") link = ", nvlink";
  char line[512];
  std::snprintf(line, sizeof line, "%zux %s (sm_%d%d, %.1f GiB%s%s)", gpus.size(), g.name.c_str(), g.cc_major,
                g.cc_minor, g.total_bytes / 1073741824.0, g.bf16 ? ", bf16" : "", link.c_str());
  return line;
}

StatusOr<HardwareProbe> ProbeHardware() {
#if SHARDD_CUDA_ENABLED
  return cuda::ProbeHardware();
#else
  return Unimplemented("hardware probe: this shardd was built without CUDA (SHARDD_WITH_CUDA=OFF or no toolkit)");
#endif
}

}  // namespace shard
