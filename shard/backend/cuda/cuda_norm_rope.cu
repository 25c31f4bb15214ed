// RMSNorm and rotary position embedding (cpu/cpu_norm_rope.cc's ops): one
// block per row for the norm's sums, fixed row chunks for its weight gradient.

#include "shard/backend/cuda/cuda_kernel_util.cuh"

namespace shard::cuda {
namespace {

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

}  // namespace

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
}  // namespace shard::cuda
