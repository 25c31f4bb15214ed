// Memory-bound kernels of the CUDA backend (cpu/cpu_elementwise.cc's ops):
// fill/add/scale/dropout, the squared-norm reduction (fixed-shape partials,
// then one ordered pass), the embedding gather/scatter and SwiGLU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "shard/backend/cuda/cuda_kernel_util.cuh"

namespace shard::cuda {
namespace {

__global__ void FillKernel(float* x, int64_t n, float v) { GRID_STRIDE(i, n) x[i] = v; }

// Backend::Dropout: the mask from backend.h's DropoutKeep (host and device),
// the kept values times the float scale — the CPU backend's bits.
__global__ void DropoutKernel(const float* x, float* out, int64_t n, float p, float keep_scale, uint64_t seed) {
  GRID_STRIDE(i, n) out[i] = DropoutKeep(seed, i, p) ? x[i] * keep_scale : 0.0f;
}
__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void ScaleKernel(float* x, int64_t n, float v) { GRID_STRIDE(i, n) x[i] *= v; }
__global__ void ScaleMatrixKernel(float* c, int64_t m, int64_t n, int64_t ldc, float beta) {
  GRID_STRIDE(i, m * n) {
    float* p = c + (i / n) * ldc + i % n;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

__global__ void SumSquaresPartial(const float* x, int64_t n, double* partials) {
  double acc = 0.0;
  GRID_STRIDE(i, n) {
    const double v = x[i];
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__device__ inline float WidenValue(float x) { return x; }
__device__ inline float WidenValue(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float WidenValue(__half x) { return __half2float(x); }

template <typename T>
__global__ void EmbeddingForwardKernel(const int32_t* tokens, int64_t rows, const T* table, int dim, float* out) {
  GRID_STRIDE(i, rows * dim) {
    const int64_t r = i / dim, c = i % dim;
    out[i] = WidenValue(table[static_cast<int64_t>(tokens[r]) * dim + c]);
  }
}

// dtable[tokens[r], :] += dout[r, :] without atomics: block (x, y) owns 128
// columns and the tokens with token % gridDim.y == y, and walks the rows in
// order, so each element sums in row order (deterministic) and no two threads
// touch the same element.
constexpr int kEmbedCols = 128;
constexpr int kEmbedBuckets = 32;
constexpr int kEmbedChunk = 2048;
__global__ void EmbeddingBackwardKernel(const int32_t* tokens, int64_t rows, const float* dout, int dim,
                                        float* dtable) {
  __shared__ int32_t tk[kEmbedChunk];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kEmbedCols + threadIdx.x;
  const unsigned bucket = blockIdx.y;
  for (int64_t r0 = 0; r0 < rows; r0 += kEmbedChunk) {
    const int64_t len = rows - r0 < kEmbedChunk ? rows - r0 : kEmbedChunk;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) tk[i] = tokens[r0 + i];
    __syncthreads();
    if (c < dim) {
      for (int64_t i = 0; i < len; ++i) {
        const int32_t t = tk[i];
        if (static_cast<unsigned>(t) % kEmbedBuckets != bucket) continue;
        dtable[static_cast<int64_t>(t) * dim + c] += dout[(r0 + i) * dim + c];
      }
    }
    __syncthreads();
  }
}

__global__ void SwiGluForwardKernel(const float* gu, int64_t rows, int ffn, float* h) {
  GRID_STRIDE(idx, rows * ffn) {
    const int64_t r = idx / ffn, j = idx % ffn;
    const float g = gu[r * 2 * ffn + j], u = gu[r * 2 * ffn + ffn + j];
    const float sig = 1.0f / (1.0f + expf(-g));
    h[idx] = g * sig * u;
  }
}

__global__ void SwiGluBackwardKernel(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu) {
  GRID_STRIDE(idx, rows * ffn) {
    const int64_t r = idx / ffn, j = idx % ffn;
    const float g = gu[r * 2 * ffn + j], u = gu[r * 2 * ffn + ffn + j];
    const float d = dh[idx];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgu[r * 2 * ffn + j] = d * u * sig * (1.0f + g * (1.0f - sig));
    dgu[r * 2 * ffn + ffn + j] = d * g * sig;
  }
}

}  // namespace

void LaunchFill(float* x, int64_t n, float value, Stream s) {
  if (n <= 0) return;
  FillKernel<<<GridFor(n), kThreads, 0, S(s)>>>(x, n, value);
  CheckLaunch("Fill");
}
void LaunchDropout(const float* x, float* out, int64_t n, float p, uint64_t seed, Stream s) {
  if (n <= 0) return;
  const float keep_scale = 1.0f / (1.0f - p);
  DropoutKernel<<<GridFor(n), kThreads, 0, S(s)>>>(x, out, n, p, keep_scale, seed);
  CheckLaunch("Dropout");
}
void LaunchAdd(const float* a, const float* b, float* out, int64_t n, Stream s) {
  if (n <= 0) return;
  AddKernel<<<GridFor(n), kThreads, 0, S(s)>>>(a, b, out, n);
  CheckLaunch("Add");
}
void LaunchScale(float* x, int64_t n, float v, Stream s) {
  if (n <= 0) return;
  ScaleKernel<<<GridFor(n), kThreads, 0, S(s)>>>(x, n, v);
  CheckLaunch("Scale");
}
void LaunchScaleMatrix(float* c, int64_t m, int64_t n, int64_t ldc, float beta, Stream s) {
  if (m <= 0 || n <= 0) return;
  ScaleMatrixKernel<<<GridFor(m * n), kThreads, 0, S(s)>>>(c, m, n, ldc, beta);
  CheckLaunch("Gemm (k = 0)");
}
void LaunchSumSquares(const float* x, int64_t n, double* partials, double* result, Stream s) {
  SumSquaresPartial<<<kSumSquaresBlocks, kThreads, 0, S(s)>>>(x, n, partials);
  OrderedSum<<<1, 1024, 0, S(s)>>>(partials, kSumSquaresBlocks, result);
  CheckLaunch("SumSquares");
}
void LaunchEmbeddingForward(const int32_t* tokens, int64_t rows, const void* table, DType table_dtype, int dim,
                            float* out, Stream s) {
  if (rows <= 0) return;
  const unsigned grid = GridFor(rows * dim);
  switch (table_dtype) {
    case DType::kBF16:
      EmbeddingForwardKernel<<<grid, kThreads, 0, S(s)>>>(tokens, rows, static_cast<const __nv_bfloat16*>(table),
                                                          dim, out);
      break;
    case DType::kF16:
      EmbeddingForwardKernel<<<grid, kThreads, 0, S(s)>>>(tokens, rows, static_cast<const __half*>(table), dim, out);
      break;
    default:
      EmbeddingForwardKernel<<<grid, kThreads, 0, S(s)>>>(tokens, rows, static_cast<const float*>(table), dim, out);
  }
  CheckLaunch("EmbeddingForward");
}
void LaunchEmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim, float* dtable,
                             Stream s) {
  if (rows <= 0) return;
  dim3 grid((dim + kEmbedCols - 1) / kEmbedCols, kEmbedBuckets);
  EmbeddingBackwardKernel<<<grid, kEmbedCols, 0, S(s)>>>(tokens, rows, dout, dim, dtable);
  CheckLaunch("EmbeddingBackward");
}
void LaunchSwiGluForward(const float* gu, int64_t rows, int ffn, float* h, Stream s) {
  if (rows * ffn <= 0) return;
  SwiGluForwardKernel<<<GridFor(rows * ffn), kThreads, 0, S(s)>>>(gu, rows, ffn, h);
  CheckLaunch("SwiGluForward");
}
void LaunchSwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu, Stream s) {
  if (rows * ffn <= 0) return;
  SwiGluBackwardKernel<<<GridFor(rows * ffn), kThreads, 0, S(s)>>>(dh, gu, rows, ffn, dgu);
  CheckLaunch("SwiGluBackward");
}
}  // namespace shard::cuda
