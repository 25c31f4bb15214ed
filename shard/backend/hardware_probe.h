// What GPUs this process sees: the hardware probe printed by
// `shardd-worker --probe` (and later reported to the coordinator for the
// planner). Plain data, no CUDA types: the CUDA runtime calls live in
// cuda/cuda_probe.cc and only run when the build has CUDA.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/common/status.h"

namespace shard {

struct GpuInfo {
  int index = 0;
  std::string name;            // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  int sm_count = 0;
  std::string pci_bus_id;      // "0000:1b:00.0"
  bool bf16 = false;           // native bf16 math (compute capability >= 8.0)
  bool tf32 = false;           // TF32 tensor cores (compute capability >= 8.0)
};

// How two local GPUs reach each other.
struct PeerLink {
  int a = 0, b = 0;
  bool peer_access = false;    // cudaDeviceCanAccessPeer
  bool native_atomics = false; // cudaDevP2PAttrNativeAtomicSupported
  int performance_rank = 0;    // cudaDevP2PAttrPerformanceRank (lower is faster)
  // "nvlink" (inferred: peer access with native atomics, which PCIe peers do
  // not offer), "pcie" (peer access without them) or "none" (staged through
  // host memory). The runtime API does not name the link; NVML would.
  std::string kind;
};

struct HardwareProbe {
  int driver_version = 0;   // CUDA version the driver supports, e.g. 13000
  int runtime_version = 0;  // CUDA runtime this build links, e.g. 13000
  std::vector<GpuInfo> gpus;
  std::vector<PeerLink> links;  // every ordered pair a != b

  // A human-readable report (several lines).
  std::string ToString() const;
  // One line: "8x NVIDIA A100-SXM4-80GB (sm_80, 79.2 GiB, bf16, nvlink)".
  std::string Brief() const;
};

// "13.0" from 13000.
inline std::string CudaVersionString(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Probes the local GPUs through the CUDA runtime API. Errors: UNIMPLEMENTED
// (built without CUDA); FAILED_PRECONDITION when the driver is older than the
// runtime needs (naming both versions); UNAVAILABLE "no CUDA device (...)".
StatusOr<HardwareProbe> ProbeHardware();

}  // namespace shard
