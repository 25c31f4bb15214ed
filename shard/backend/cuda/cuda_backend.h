// The CUDA backend: device memory from the stream-ordered pool, one compute
// stream, cuBLASLt GEMMs (fp32, optionally TF32) and the kernels of the .cu
// files (cuda_kernels.h). Only shard/backend includes this
// header; core code goes through shard::Backend.
#pragma once

#include <string>

#include "shard/backend/backend.h"
#include "shard/backend/hardware_probe.h"

namespace shard::cuda {

// A new CUDA backend on device `index`; the caller owns it. UNAVAILABLE "cuda
// backend: no CUDA device (cudaGetDeviceCount: ...)" without a usable GPU.
StatusOr<Backend*> CreateBackend(int index, const BackendOptions& options);

// Devices the runtime sees; 0 on any error, with the reason in *why if given.
int DeviceCount(std::string* why);

// See shard/backend/hardware_probe.h.
StatusOr<HardwareProbe> ProbeHardware();

}  // namespace shard::cuda
