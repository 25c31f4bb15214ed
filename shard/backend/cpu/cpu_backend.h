// The CPU backend: host memory, OpenBLAS for GEMMs, hand-written vectorised
// kernels (shard::ParallelFor) for everything else. Only backend.cc includes
// this header; core code goes through shard::Backend.
#pragma once

#include "shard/backend/backend.h"

namespace shard::cpu {

// A new CPU backend; the caller owns it. Instances share no state, but the
// kernels share the process-wide ParallelFor pool, so calls serialize there.
Backend* CreateBackend();

}  // namespace shard::cpu
