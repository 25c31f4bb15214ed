// Row-major GEMMs as cuBLASLt column-major ones: a row-major C[m,n] is a
// column-major C^T[n,m] = op(B)^T op(A)^T, so A and B swap places and m and n
// swap roles; each matrix keeps its own transpose flag and leading dimension.
#include "shard/backend/cuda/cuda_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "shard/backend/cuda/cuda_kernels.h"

namespace shard::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::string LtError(const char* call, cublasStatus_t st) {
  return std::string("cuda backend: ") + call + " failed: " + cublasLtGetStatusString(st) + " (" +
         std::to_string(static_cast<int>(st)) + ")";
}
#define LT_CHECK(call)                                            \
  do {                                                            \
    const cublasStatus_t _st = (call);                            \
    SHARD_CHECK_MSG(_st == CUBLAS_STATUS_SUCCESS, LtError(#call, _st)); \
  } while (0)

// Largest power of two (<= 256) dividing the address: cuBLASLt's preference
// otherwise assumes 256-byte aligned operands, and parameter tensors inside a
// flat unit start at arbitrary float offsets.
int Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 4 && (a % al) != 0) al /= 2;
  return al;
}

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtGemm::LtGemm(bool tf32, bool native_bf16, void* stream) : tf32_(tf32), native_bf16_(native_bf16), stream_(stream) {}

StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(bool tf32, bool native_bf16, void* stream) {
  std::unique_ptr<LtGemm> g(new LtGemm(tf32, native_bf16, stream));
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t st = cublasLtCreate(&h);
  if (st != CUBLAS_STATUS_SUCCESS) return Unavailable(LtError("cublasLtCreate", st));
  g->handle_ = h;
  const cudaError_t e = cudaMalloc(&g->workspace_, kWorkspaceBytes);
  if (e != cudaSuccess)
    return ResourceExhausted(std::string("cuda backend: cuBLASLt workspace: ") + cudaGetErrorString(e));
  g->workspace_bytes_ = kWorkspaceBytes;
  return g;
}

LtGemm::~LtGemm() {
  plans_.clear();
  for (Scratch* x : {&in_a_, &in_b_})
    if (x->ptr) cudaFreeAsync(x->ptr, static_cast<cudaStream_t>(stream_));
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

LtGemm::Plan* LtGemm::GetPlan(const GemmArgs& g, DType input, const void* a_ptr, const void* b_ptr) {
  const Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.beta != 0.0f,
                Alignment(a_ptr), Alignment(b_ptr), Alignment(g.c), static_cast<int>(input)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  // Two-byte inputs: tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F
  // with 16-bit A/B); fp32 inputs: TF32 when allowed, else strict fp32.
  const bool two_byte = input != DType::kF32;
  const cublasComputeType_t compute =
      !two_byte && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t in_type = input == DType::kBF16 ? CUDA_R_16BF : input == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
  LT_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  // Column-major view: C^T[n,m] = op'(B')[n,k] op'(A')[k,m] with A' = B, B' = A.
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // Stored (column-major) shapes: B row-major [k,n] (or [n,k] when transposed) is
  // column-major [n,k] (or [k,n]); likewise A.
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb));
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda));
  LT_CHECK(cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, g.n, g.m, g.ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = workspace_bytes_;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = Alignment(b_ptr), al_b = Alignment(a_ptr), al_c = Alignment(g.c);
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->op, plan->a, plan->b, plan->c,
                                     plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  SHARD_CHECK_MSG(st == CUBLAS_STATUS_SUCCESS && found > 0,
                  "cuda backend: cuBLASLt has no algorithm for a GEMM m=" + std::to_string(g.m) + " n=" +
                      std::to_string(g.n) + " k=" + std::to_string(g.k) + " inputs " + DTypeName(input) + " (" +
                      cublasLtGetStatusString(st) + ")");
  plan->algo = result.algo;
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

void* LtGemm::Grow(Scratch* x, size_t bytes) {
  if (bytes > x->bytes) {
    const auto st = static_cast<cudaStream_t>(stream_);
    if (x->ptr) cudaFreeAsync(x->ptr, st);
    x->ptr = nullptr;
    x->bytes = 0;
    const cudaError_t e = cudaMallocAsync(&x->ptr, bytes, st);
    SHARD_CHECK_MSG(e == cudaSuccess, std::string("cuda backend: GEMM input scratch of ") + std::to_string(bytes) +
                                          " bytes: " + cudaGetErrorString(e));
    x->bytes = bytes;
  }
  return x->ptr;
}

const void* LtGemm::Prepare(const float* x, DType stored, int64_t rows, int64_t cols, int64_t ld, DType compute,
                            Scratch* in) {
  const int64_t span = (rows - 1) * ld + cols;  // the operand keeps its leading dimension
  const bool emulated = compute == DType::kBF16 && !native_bf16_;  // no bf16 tensor cores
  if (stored != DType::kF32) {
    if (stored == compute && !emulated) return x;  // already what the tensor cores take
    // Widened exactly: for fp32 compute, or as the fp32 values an emulated
    // bf16 GEMM multiplies (rounding them through bf16 again changes nothing).
    auto* w = static_cast<float*>(Grow(in, static_cast<size_t>(span) * sizeof(float)));
    LaunchCastToF32(x, w, span, stored, stream_);
    return w;
  }
  if (compute == DType::kF32) return x;
  if (emulated) {  // fp32 values rounded through bf16
    auto* w = static_cast<float*>(Grow(in, static_cast<size_t>(span) * sizeof(float)));
    LaunchRoundThrough(x, w, span, compute, stream_);
    return w;
  }
  void* lp = Grow(in, static_cast<size_t>(span) * DTypeSize(compute));
  LaunchCastFromF32(x, lp, span, compute, stream_);
  return lp;
}

void LtGemm::Run(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  CheckStoredB(g);
  if (g.k <= 0) {
    LaunchScaleMatrix(g.c, g.m, g.n, g.ldc, g.beta, stream_);
    return;
  }
  const void* a = Prepare(g.a, DType::kF32, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.compute, &in_a_);
  const void* b = Prepare(g.b, g.b_dtype, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.compute, &in_b_);
  const DType input = g.compute == DType::kBF16 && !native_bf16_ ? DType::kF32 : g.compute;
  Plan* p = GetPlan(g, input, a, b);
  LT_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p->op, &g.alpha, b, p->a, a, p->b, &g.beta,
                          g.c, p->c, g.c, p->c, &p->algo, workspace_, workspace_bytes_,
                          static_cast<cudaStream_t>(stream_)));
}

}  // namespace shard::cuda
