// The hardware probe on the CUDA runtime API only (the driver API's libcuda
// is not linked: a stub on build machines without a GPU).
#include <cuda_runtime.h>

#include "shard/backend/cuda/cuda_backend.h"

namespace shard::cuda {

StatusOr<HardwareProbe> ProbeHardware() {
  HardwareProbe hw;
  cudaRuntimeGetVersion(&hw.runtime_version);
  // 0 when no driver is installed at all.
  if (cudaDriverGetVersion(&hw.driver_version) != cudaSuccess) hw.driver_version = 0;
  if (hw.driver_version == 0)
    return Unavailable("no CUDA device (no NVIDIA driver found; this build's runtime is CUDA " +
                       CudaVersionString(hw.runtime_version) + ")");
  // Within a major version the runtime runs on an older driver (minor version
  // compatibility); across major versions it does not.
  if (hw.driver_version / 1000 < hw.runtime_version / 1000)
    return FailedPrecondition("the NVIDIA driver supports CUDA " + CudaVersionString(hw.driver_version) +
                              " but this shardd was built with the CUDA " +
                              CudaVersionString(hw.runtime_version) +
                              " runtime: install a newer driver (or build shardd with an older toolkit)");
  std::string why;
  const int n = DeviceCount(&why);
  if (n == 0) return Unavailable("no CUDA device (" + why + ")");
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess)
      return Unavailable("cudaGetDeviceProperties(" + std::to_string(i) + "): " + cudaGetErrorString(e));
    GpuInfo g;
    g.index = i;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.total_bytes = static_cast<int64_t>(p.totalGlobalMem);
    g.sm_count = p.multiProcessorCount;
    g.bf16 = p.major >= 8;
    g.tf32 = p.major >= 8;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      g.free_bytes = static_cast<int64_t>(free_b);
    hw.gpus.push_back(g);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      PeerLink l;
      l.a = a;
      l.b = b;
      int v = 0;
      l.peer_access = cudaDeviceCanAccessPeer(&v, a, b) == cudaSuccess && v;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, a, b) == cudaSuccess)
        l.native_atomics = v != 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, a, b) == cudaSuccess)
        l.performance_rank = v;
      l.kind = !l.peer_access ? "none" : l.native_atomics ? "nvlink" : "pcie";
      hw.links.push_back(l);
    }
  }
  cudaGetLastError();
  return hw;
}

}  // namespace shard::cuda
