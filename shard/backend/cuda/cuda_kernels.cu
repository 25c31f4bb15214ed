// Memory-bound kernels of the CUDA backend: fill/add/scale, the squared-norm
// reduction, embedding gather/scatter, RMSNorm, RoPE, SwiGLU, the fused
// cross-entropy and AdamW. Reductions have a fixed shape and order (partials
// per block or per row chunk, then one ordered pass), so results do not depend
// on scheduling: the same inputs give the same bits, run after run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

inline cudaStream_t S(Stream s) { return static_cast<cudaStream_t>(s); }

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
inline unsigned GridFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (1 << 16)) b = 1 << 16;
  return static_cast<unsigned>(b);
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__device__ T WarpSum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T warp_part[32];
  __shared__ T total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < static_cast<int>(blockDim.x >> 5) ? warp_part[lane] : T(0);
    w = WarpSum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  T r = total;
  __syncthreads();  // total and warp_part may be reused by the next call
  return r;
}

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

// One block of 1024 threads sums `n` doubles in a fixed order.
__global__ void OrderedSum(const double* values, int64_t n, double* result) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += values[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) *result = acc;
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

// Per-row sums: float per thread, double across the block (like the CPU's
// double row sums, to well under float rounding).
__global__ void RmsNormForwardKernel(const float* x, const float* w, int dim, float eps, float* y, float* rstd) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) acc += xr[j] * xr[j];
  const double ss = BlockSum(static_cast<double>(acc));
  const float rs = static_cast<float>(1.0 / sqrt(ss / dim + static_cast<double>(eps)));
  if (threadIdx.x == 0) rstd[r] = rs;
  float* yr = y + r * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = xr[j] * rs * w[j];
}

__global__ void RmsNormBackwardDx(const float* dy, const float* x, const float* w, const float* rstd, int dim,
                                  float* dx) {
  const int64_t r = blockIdx.x;
  const float* dyr = dy + r * dim;
  const float* xr = x + r * dim;
  float acc = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) acc += dyr[j] * w[j] * xr[j];
  const double dot = BlockSum(static_cast<double>(acc));
  const float rs = rstd[r];
  const float coef = static_cast<float>(static_cast<double>(rs) * rs * rs * dot / dim);
  float* dxr = dx + r * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dxr[j] = rs * dyr[j] * w[j] - xr[j] * coef;
}

constexpr int kNormChunkRows = 64;
// partial[chunk, j] = sum over the chunk's rows of dy * x * rstd.
__global__ void RmsNormBackwardDwPartial(const float* dy, const float* x, const float* rstd, int64_t rows, int dim,
                                         float* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kNormChunkRows;
  const int64_t r1 = r0 + kNormChunkRows < rows ? r0 + kNormChunkRows : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r) acc += dy[r * dim + j] * x[r * dim + j] * rstd[r];
  partial[blockIdx.y * static_cast<int64_t>(dim) + j] = acc;
}
__global__ void RmsNormBackwardDwSum(const float* partial, int64_t chunks, int dim, float* dw) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * dim + j];
  dw[j] += acc;
}

__global__ void RopeKernel(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
                           const int32_t* pos, const float* cos_sin, float sign) {
  const int half = head_dim / 2;
  GRID_STRIDE(idx, rows * n_heads * half) {
    const int i = static_cast<int>(idx % half);
    const int64_t rh = idx / half;
    const int h = static_cast<int>(rh % n_heads);
    const int64_t r = rh / n_heads;
    const float* cs = cos_sin + static_cast<int64_t>(pos[r]) * head_dim;
    const float c = cs[i], s = sign * cs[half + i];
    float* xh = x + r * row_stride + static_cast<int64_t>(h) * head_dim;
    const float lo = xh[i], hi = xh[i + half];
    xh[i] = lo * c - hi * s;
    xh[i + half] = hi * c + lo * s;
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

// One block per row: an online max/sum pass over the vocabulary in thread
// strides (the row is read twice in all, and nothing beside the logits is
// allocated), then the gradient written in place.
constexpr int kCeThreads = 512;
__global__ void CrossEntropyKernel(float* logits, const int32_t* targets, int vocab, float grad_scale, bool grad,
                                   double* row_loss, int64_t* bad_target) {
  const int64_t r = blockIdx.x;
  float* x = logits + r * static_cast<int64_t>(vocab);
  const int32_t t = targets[r];
  if (t < 0 || t >= vocab) {
    if (t >= vocab && threadIdx.x == 0) atomicCAS(reinterpret_cast<unsigned long long*>(bad_target), 0ull,
                                                  static_cast<unsigned long long>(r + 1));
    if (grad)
      for (int j = threadIdx.x; j < vocab; j += blockDim.x) x[j] = 0.0f;
    if (threadIdx.x == 0) row_loss[r] = 0.0;
    return;
  }
  float m = -INFINITY, s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = x[j];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  // Combine (m, s) pairs: first the block max, then sums rescaled to it.
  __shared__ float red[kCeThreads / 32];
  __shared__ float block_max;
  float mm = m;
  for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mm;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = red[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) b = fmaxf(b, red[w]);
    block_max = b;
  }
  __syncthreads();
  const float mx = block_max;
  const double part = m == -INFINITY ? 0.0 : static_cast<double>(s) * exp(static_cast<double>(m) - mx);
  const double sum = BlockSum(part);
  if (threadIdx.x == 0) row_loss[r] = log(sum) + (static_cast<double>(mx) - x[t]);
  if (!grad) return;
  __syncthreads();  // x[t] is read above before it is overwritten below
  const float scale = static_cast<float>(grad_scale / sum);
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float v = expf(x[j] - mx) * scale;
    if (j == t) v -= grad_scale;
    x[j] = v;
  }
}

__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamWFactors f) {
  GRID_STRIDE(i, n) {
    const AdamWElement r = AdamWUpdate(param[i], grad[i], m[i], v[i], f);  // adamw_math.h
    m[i] = r.m;
    v[i] = r.v;
    param[i] = r.param;
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
void LaunchRmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps, float* y,
                          float* rstd, Stream s) {
  if (rows <= 0) return;
  RmsNormForwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, S(s)>>>(x, w, dim, eps, y, rstd);
  CheckLaunch("RmsNormForward");
}
int64_t RmsNormPartialFloats(int64_t rows, int dim) {
  return (rows + kNormChunkRows - 1) / kNormChunkRows * static_cast<int64_t>(dim);
}
void LaunchRmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd, int64_t rows,
                           int dim, float* dx, float* dw, float* partial, Stream s) {
  if (rows <= 0) return;
  RmsNormBackwardDx<<<static_cast<unsigned>(rows), kThreads, 0, S(s)>>>(dy, x, w, rstd, dim, dx);
  const int64_t chunks = (rows + kNormChunkRows - 1) / kNormChunkRows;
  dim3 grid((dim + kThreads - 1) / kThreads, static_cast<unsigned>(chunks));
  RmsNormBackwardDwPartial<<<grid, kThreads, 0, S(s)>>>(dy, x, rstd, rows, dim, partial);
  RmsNormBackwardDwSum<<<(dim + kThreads - 1) / kThreads, kThreads, 0, S(s)>>>(partial, chunks, dim, dw);
  CheckLaunch("RmsNormBackward");
}
void LaunchRope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim, const int32_t* pos,
                const float* cos_sin, bool inverse, Stream s) {
  const int64_t n = rows * n_heads * (head_dim / 2);
  if (n <= 0) return;
  RopeKernel<<<GridFor(n), kThreads, 0, S(s)>>>(x, rows, row_stride, n_heads, head_dim, pos, cos_sin,
                                                 inverse ? -1.0f : 1.0f);
  CheckLaunch("Rope");
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
void LaunchCrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab, float grad_scale,
                        bool grad, double* row_loss, double* result, int64_t* bad_target, Stream s) {
  cudaMemsetAsync(bad_target, 0, sizeof(int64_t), S(s));
  CrossEntropyKernel<<<static_cast<unsigned>(rows), kCeThreads, 0, S(s)>>>(logits, targets, vocab, grad_scale, grad,
                                                                           row_loss, bad_target);
  OrderedSum<<<1, 1024, 0, S(s)>>>(row_loss, rows, result);
  CheckLaunch("CrossEntropy");
}
void LaunchAdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWFactors& f, Stream s) {
  if (n <= 0) return;
  AdamWKernel<<<GridFor(n), kThreads, 0, S(s)>>>(param, grad, m, v, n, f);
  CheckLaunch("AdamW");
}

void CheckLaunch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  SHARD_CHECK_MSG(e == cudaSuccess, std::string("cuda backend: launching ") + what + " failed: " +
                                        cudaGetErrorString(e));
}

}  // namespace shard::cuda
