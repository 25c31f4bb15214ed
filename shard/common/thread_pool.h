// ParallelFor over a small, process-wide pool of worker threads.
//
// Why not OpenMP: OpenBLAS (pthreads build) and libgomp would each keep their
// own spinning threads on a 2-core machine; one pool whose idle workers sleep on
// a condition variable stays out of OpenBLAS's way between GEMMs.
#pragma once

#include <cstdint>
#include <functional>

namespace shard {

// Number of threads ParallelFor uses (including the caller). Default: hardware
// concurrency, or SHARDD_NUM_THREADS when set.
int NumComputeThreads();
// Changes the pool size; call from the main thread while no ParallelFor runs.
void SetNumComputeThreads(int n);

// Runs fn(begin, end) over [0, n) split into contiguous chunks of at least
// `grain` items. Blocks until all chunks are done. Not reentrant: fn must not
// call ParallelFor. Thread-safe against other callers (they serialize).
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace shard
