// Where each token's segment begins (packed documents), for both attention
// implementations (cuda_attention.cu and the tensor-core kernels).
#include <cuda_runtime.h>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

// start[b*seq + t]: where token t's segment begins. One thread per sequence.
__global__ void SegmentStartsKernel(const int32_t* seg, int batch, int seq, int32_t* start) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t* sb = seg + static_cast<int64_t>(b) * seq;
  int32_t* st = start + static_cast<int64_t>(b) * seq;
  int32_t cur = 0;
  int32_t prev = seq > 0 ? sb[0] : 0;
  for (int t = 0; t < seq; ++t) {
    const int32_t v = sb[t];
    if (t > 0 && v != prev) cur = t;
    prev = v;
    st[t] = cur;
  }
}

}  // namespace

const int32_t* LaunchAttentionSegmentStarts(const AttentionShape& sh, const int32_t* segment_ids, int32_t* starts,
                                            Stream s) {
  if (segment_ids == nullptr) return nullptr;
  SegmentStartsKernel<<<static_cast<unsigned>((sh.batch + 127) / 128), 128, 0, static_cast<cudaStream_t>(s)>>>(
      segment_ids, static_cast<int>(sh.batch), static_cast<int>(sh.seq), starts);
  CheckLaunch("attention segment starts");
  return starts;
}

}  // namespace shard::cuda
