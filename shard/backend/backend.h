// The Backend: every numeric operation the model, loss and optimizer need, on
// buffers that live in the backend's memory (host memory for cpu/, device
// memory for cuda/). Core code (shard/model, shard/optim, shard/train) calls
// only this interface and never includes a backend header; CreateBackend picks
// the implementation.
//
// Conventions: row-major; activations are [rows, features] with rows =
// batch * seq; weights use HF's nn.Linear layout [out_features, in_features];
// "accumulates" means the op adds into its output (gradient accumulation),
// otherwise outputs are overwritten. The math is fp32 throughout; reduced
// precision (bf16/fp16) exists as storage and wire format, reached through
// the Cast ops (mixed precision: FSDP casts gathered weights and gradients),
// as GEMM and attention input rounding (GemmArgs/AttentionShape::compute),
// and as a stored weight some ops read directly (GemmArgs::b_dtype, the
// embedding's table_dtype: FSDP's two-byte compute copies).
//
// Device backends (cuda/) queue work asynchronously on their own stream: pass
// host data only through CopyToDevice/CopyToHost (both return with the copy
// done) or CopyToHostAsync plus an event, and results returned by value
// (SumSquares, CrossEntropy) wait for the work they need. Buffers may be freed
// while queued work still uses them (the backend orders the free after that
// work — including an asynchronous copy out of them).
//
// Thread-safety: a Backend may be used from one thread at a time per instance;
// a BackendEvent it returned may be waited on (and destroyed) from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major with leading dims.
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
  // kBF16/kF16: A and B are rounded to this type (nearest even) before the
  // multiply; products and accumulation stay fp32 and C stays fp32 — what
  // tensor cores compute from two-byte inputs. The CPU backend rounds the same
  // way, so it remains the reference (results differ only in summation order).
  // kF32: fp32 inputs (TF32 on GPUs where BackendOptions allow it).
  DType compute = DType::kF32;
  // The type B is stored in: kF32, or a two-byte type whose values sit behind
  // the float* (a two-byte compute copy of a weight, FsdpRuntime). A two-byte
  // B needs compute kF32 (B is widened exactly) or the same type (B is the
  // tensor cores' input as it is: no cast, no scratch). The product is the
  // one of an fp32 B holding the same values, bit for bit on the CPU.
  DType b_dtype = DType::kF32;
};
// Aborts (a programming error) when g's b_dtype breaks the rule above; every
// backend's Gemm checks it the same way.
void CheckStoredB(const GemmArgs& g);
// The same for Backend::DequantizeNf4's output type: kF32 or round_to.
void CheckNf4Output(DType round_to, DType out_dtype);

// Shape of a fused qkv activation: [batch*seq, (n_heads + 2*n_kv_heads) * head_dim],
// query heads first, then key heads, then value heads. Query head h reads
// key/value head h / (n_heads / n_kv_heads) (grouped-query attention).
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // kBF16/kF16: q, k and v are rounded to this type before use (tensor-core
  // attention on GPUs, which also rounds the probabilities before P·V, and
  // dout and dS before their GEMMs); scores, softmax statistics, accumulation, out and dqkv
  // stay fp32. The CPU backend rounds q, k and v only (its P stays fp32), so
  // the two agree to the two-byte type's precision. kF32: fp32 throughout.
  DType compute = DType::kF32;
  int64_t qkv_stride() const { return static_cast<int64_t>(n_heads + 2 * n_kv_heads) * head_dim; }
  int64_t out_stride() const { return static_cast<int64_t>(n_heads) * head_dim; }
};

// A chunk of query positions [q_offset, q_offset + q_len) of a sequence
// whose keys and values are all present (context parallelism: a rank's own
// queries over the gathered keys and values). Causal: position i sees keys
// [segment start, i], so only keys below q_offset + q_len matter.
struct AttentionChunk {
  int64_t q_offset = 0;
  int64_t q_len = 0;
};

// torch.optim.AdamW semantics: decoupled decay p -= lr*wd*p, bias-corrected moments.
struct AdamWArgs {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based step count for bias correction
  float grad_scale = 1.0f;  // gradients are multiplied by this first (clipping, loss-scale undo)
};

// A point in a backend's queue of work (RecordEvent). Thread-safety: Wait and
// the destructor may be called from any thread, concurrently with the
// backend's own thread queueing more work — the FSDP runtime's host worker
// waits on events the compute thread recorded.
class BackendEvent {
 public:
  virtual ~BackendEvent() = default;
  // Blocks the calling host thread until all work queued before the record is
  // done (a no-op for synchronous backends, whose work is done on return).
  virtual void Wait() = 0;
  // The device event (a cudaEvent_t on cuda/) for code that makes other device
  // work wait for it (CommOptions::ready_event); null on synchronous backends.
  virtual void* native_handle() const { return nullptr; }
};

// One run of NF4-quantised values in backend memory (the format of
// shard/tensor/nf4.h: 4-bit codes into kNf4Codebook, two per byte, element 2i
// in the high nibble; one scale per block). Block b's scale is absmax[b], or
// with double quantisation (absmax null) absmax_q[b] * absmax_scale[b / 256]
// + *absmax_mean. numel is a whole number of blocks. QLoRA's frozen base
// travels and is stored like this (shard/fsdp/nf4_shard.h).
struct Nf4Run {
  const uint8_t* codes = nullptr;
  const float* absmax = nullptr;
  const int8_t* absmax_q = nullptr;
  const float* absmax_scale = nullptr;
  const float* absmax_mean = nullptr;  // one float, in backend memory too
  int64_t numel = 0;
  int block_size = 64;
};

// One MoE layer call's routing buffers (Backend::MoeRoute), in backend memory.
struct MoeRouting {
  int64_t rows = 0;
  int experts = 0;
  int k = 0;
  bool renormalize = true;
  float* probs = nullptr;     // [rows, experts] softmax of the router logits
  int32_t* expert = nullptr;  // [rows, k] the selected experts, by descending probability
  float* weight = nullptr;    // [rows, k] their combine weights
  int32_t* perm = nullptr;    // [rows * k] assignments grouped by expert
  int32_t* offsets = nullptr; // [experts + 1]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Whether the device computes in bf16 natively (CUDA compute capability >=
  // 8.0). precision: auto picks bf16 where it does and fp16 elsewhere on GPUs;
  // the CPU stores bf16 but computes in fp32, so auto stays fp32 there.
  virtual bool native_bf16() const { return false; }
  // The device stream every op is queued on (a cudaStream_t on cuda/), for
  // code that must order other device work after it — the nccl communicator
  // (CommConfig::device_stream). Null on synchronous backends.
  virtual void* native_stream() const { return nullptr; }
  // False only for the memory simulator's backend (sim/), whose buffers are
  // addresses that hold nothing: code that reads or writes host memory the
  // backend handed out (optimizer offload, checkpoint snapshots, weight
  // loading) skips those bytes then, and only the allocations are real.
  virtual bool holds_data() const { return true; }

  // ---- Memory -------------------------------------------------------------
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  // Queues a copy to host memory and returns at once; host_dst holds the bytes
  // only after an event recorded later (RecordEvent) has been waited on, and
  // must not be read or written before that. host_dst must come from
  // AllocateHost (pinned: a device copy into pageable memory would block).
  // `src` may be freed right after the call (frees are ordered after queued
  // work, this copy included). The default copies synchronously.
  virtual void CopyToHostAsync(void* host_dst, const void* src, size_t bytes) { CopyToHost(host_dst, src, bytes); }
  // An event after all work queued so far. The default is already complete.
  virtual std::shared_ptr<BackendEvent> RecordEvent();
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // Copies `rows` rows of row_bytes each: row r from src + r*src_stride to
  // dst + r*dst_stride (strides in bytes; the rows must not overlap). Moves one
  // head group out of a fused qkv activation and back (Qwen3's q/k norms). The
  // default issues one Copy per row; device backends do it in one call.
  virtual void Copy2D(void* dst, size_t dst_stride, const void* src, size_t src_stride, size_t row_bytes,
                      int64_t rows);
  virtual void Fill(float* x, int64_t n, float value) = 0;
  // dst (n elements of `to`) = src rounded to nearest even (NaN stays NaN,
  // overflow becomes inf); kF32 copies. Same bits as ConvertFromF32 in dtype.h.
  virtual void CastFromF32(const float* src, void* dst, int64_t n, DType to) = 0;
  // dst (n floats) = src (n elements of `from`) widened exactly; kF32 copies.
  virtual void CastToF32(const void* src, float* dst, int64_t n, DType from) = 0;
  // Waits for all queued work (a no-op on CPU).
  virtual void Synchronize() = 0;
  // Host memory for state kept off the device (optimizer offload). Device
  // backends return page-locked memory, so CopyToDevice/CopyToHost run at full
  // bus speed and CopyToHostAsync is truly asynchronous; the default is 64-byte
  // aligned ordinary memory. Free with FreeHost of the same backend.
  virtual StatusOr<void*> AllocateHost(size_t bytes);
  virtual void FreeHost(void* ptr);

  // ---- Dense linear algebra and elementwise --------------------------------
  virtual void Gemm(const GemmArgs& args) = 0;
  // out = a + b (out may alias a or b).
  virtual void Add(const float* a, const float* b, float* out, int64_t n) = 0;
  // x *= s.
  virtual void Scale(float* x, int64_t n, float s) = 0;
  // sum of x[i]^2 accumulated in double.
  virtual double SumSquares(const float* x, int64_t n) = 0;
  // Inverted dropout: out[i] = DropoutKeep(seed, i, p) ? x[i] * (1 / (1 - p)) : 0
  // (the scale rounded to float first; out may alias x). The mask is a pure
  // function of (seed, i), so a backward pass regenerates it instead of
  // storing it, and applying the op to a gradient with the same seed is its
  // own backward. The default round-trips through host memory (correct on
  // every backend); the CPU and CUDA backends override it with the same bits.
  virtual void Dropout(const float* x, float* out, int64_t n, float p, uint64_t seed);

  // out[i] = kNf4Codebook[code i] * scale of i's block, then rounded to
  // round_to (kF32: no rounding) — the compute copy of an NF4 shard. out_dtype
  // kF32: out holds the rounded values widened back (n floats); out_dtype ==
  // round_to (two-byte): out holds them as two-byte values (behind the float*,
  // FsdpOptions::two_byte_compute_copy). The default round-trips through host
  // memory with the reference loop; the CPU and CUDA backends override it.
  virtual void DequantizeNf4(const Nf4Run& run, float* out, DType round_to, DType out_dtype);

  // ---- Model ops ----------------------------------------------------------
  // out[i,:] = table[tokens[i],:] widened to fp32. The table holds
  // table_dtype values (two-byte ones behind the float*: a two-byte compute
  // copy). Tokens must be in [0, vocab); callers check.
  virtual void EmbeddingForward(const int32_t* tokens, int64_t rows, const float* table, DType table_dtype,
                                int dim, float* out) = 0;
  // dtable[tokens[i],:] += dout[i,:] (accumulates).
  virtual void EmbeddingBackward(const int32_t* tokens, int64_t rows, const float* dout, int dim,
                                 float* dtable) = 0;

  // y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps), saved per row.
  virtual void RmsNormForward(const float* x, const float* w, int64_t rows, int dim, float eps,
                              float* y, float* rstd) = 0;
  // dx overwritten; dw accumulates.
  virtual void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rstd,
                               int64_t rows, int dim, float* dx, float* dw) = 0;

  // Rotates `n_heads` consecutive heads of each row in place (HF rotate-half
  // convention: pairs (i, i + head_dim/2)). Row r starts at x + r*row_stride and
  // has position pos[r]. `cos_sin` is a table [max_pos, head_dim] holding
  // cos(pos*inv_freq[i]) in the first head_dim/2 columns and sin in the rest.
  // inverse = true applies the transposed rotation (the backward pass).
  virtual void Rope(float* x, int64_t rows, int64_t row_stride, int n_heads, int head_dim,
                    const int32_t* pos, const float* cos_sin, bool inverse) = 0;

  // Causal self-attention on fused qkv (see AttentionShape), scale 1/sqrt(head_dim).
  // If segment_ids is non-null ([batch*seq]), a token attends only to earlier
  // tokens of its own segment (packed samples; segments are contiguous runs).
  // out: [batch*seq, n_heads*head_dim]; lse: [batch, n_heads, seq] log-sum-exp
  // of each softmax row, saved for the backward pass.
  virtual void AttentionForward(const AttentionShape& shape, const float* qkv,
                                const int32_t* segment_ids, float* out, float* lse) = 0;
  // dqkv (same layout as qkv) is overwritten.
  virtual void AttentionBackward(const AttentionShape& shape, const float* qkv,
                                 const int32_t* segment_ids, const float* out, const float* lse,
                                 const float* dout, float* dqkv) = 0;

  // The same attention for a chunk of query positions (AttentionChunk) over
  // all of the sequence's keys: shape.seq is the key rows per sequence;
  // q: [batch*q_len, n_heads*head_dim] (the chunk's queries, roped at their
  // positions), kv: [batch*seq, 2*n_kv_heads*head_dim] (key heads, then value
  // heads), segment_ids: [batch*seq] or null; out: [batch*q_len,
  // n_heads*head_dim], lse: [batch, n_heads, q_len]. Each query row's result
  // equals that row of AttentionForward over the whole sequence (to float
  // rounding). Backends without it return Unimplemented (the defaults); the
  // CPU backend is the reference.
  virtual Status AttentionChunkForward(const AttentionShape& shape, const AttentionChunk& chunk, const float* q,
                                       const float* kv, const int32_t* segment_ids, float* out, float* lse);
  // dq (like q) and dkv (like kv: this chunk's contribution to every key row,
  // zero past the chunk's end) are overwritten.
  virtual Status AttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& chunk, const float* q,
                                        const float* kv, const int32_t* segment_ids, const float* out,
                                        const float* lse, const float* dout, float* dq, float* dkv);

  // gu: [rows, 2*ffn] = [gate | up]; h = silu(gate) * up, h: [rows, ffn].
  virtual void SwiGluForward(const float* gu, int64_t rows, int ffn, float* h) = 0;
  // dgu overwritten.
  virtual void SwiGluBackward(const float* dh, const float* gu, int64_t rows, int ffn, float* dgu) = 0;

  // Cross-entropy of logits [rows, vocab] against targets (target < 0: not a
  // target). Returns the sum over target rows of -log softmax(logits)[target],
  // accumulated in double. If `grad`, logits is overwritten with
  // grad_scale * d(sum)/d(logits) (zero rows for non-targets).
  virtual double CrossEntropy(float* logits, const int32_t* targets, int64_t rows, int vocab,
                              float grad_scale, bool grad) = 0;

  // ---- Mixture of experts (shard/model/moe_mlp.h) -------------------------
  // Routing as transformers: probs = softmax(logits) in fp32, the k largest
  // per row (ties: the lower expert), their weights renormalised to sum 1 iff
  // r.renormalize; then the rows*k assignments a = row*k + slot grouped by
  // expert (stable): perm lists them expert by expert, offsets[e]..offsets[e+1]
  // those of expert e. Backends without these ops return Unimplemented naming
  // the op (the defaults below); the CPU backend is the reference.
  virtual Status MoeRoute(const float* logits, const MoeRouting& r);
  // d_logits [rows, E] = d/dlogits of Σ d_weight·weight (+ Σ d_probs·probs
  // when d_probs is not null): through the renormalisation and the softmax;
  // the selection itself has no gradient.
  virtual Status MoeRouteBackward(const MoeRouting& r, const float* d_weight, const float* d_probs, float* d_logits);
  // out[p] = x[perm[p] / k] for p < n (n = rows*k): token rows in expert order.
  virtual Status MoePermute(const float* x, const int32_t* perm, int64_t n, int k, int64_t dim, float* out);
  // out[perm[p] / k] += weight[perm[p]] * y[p] (weight null: 1); each token
  // adds its k rows in slot order (deterministic).
  virtual Status MoeUnpermute(const float* y, const int32_t* perm, const float* weight, int64_t n, int k,
                              int64_t dim, float* out);
  // The combine's backward: dy[p] = weight[perm[p]] * dout[perm[p] / k] and
  // d_weight[perm[p]] = dot(dout[perm[p] / k], y[p]) (both overwritten).
  virtual Status MoeUnpermuteBackward(const float* dout, const float* y, const int32_t* perm, const float* weight,
                                      int64_t n, int k, int64_t dim, float* dy, float* d_weight);

  // ---- Optimizer ----------------------------------------------------------
  virtual void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWArgs& args) = 0;
};

// Whether element i survives dropout with probability p under `seed`: a
// splitmix64 hash of (seed, i) compared with p * 2^32. Pure, so any backend
// (and any reference in a test) draws the same mask.
// (Host and device: the CUDA kernel includes this header through nvcc.)
#if defined(__CUDACC__)
#define SHARD_HOST_DEVICE __host__ __device__
#else
#define SHARD_HOST_DEVICE
#endif
SHARD_HOST_DEVICE inline bool DropoutKeep(uint64_t seed, int64_t i, float p) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(i) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 32) >= static_cast<double>(p) * 4294967296.0;
}

// Choices a backend makes once, at creation.
struct BackendOptions {
  // fp32 GEMMs may use TF32 tensor cores (compute capability >= 8.0): ~10 bits
  // of mantissa in the products, fp32 accumulation. Ignored by the CPU backend.
  bool allow_tf32 = true;
};

// "cpu"; "sim" (holds no data, does no math: sim/sim_backend.h); "cuda" (device 0) or "cuda:N" — a clear UNAVAILABLE error when the
// build has no CUDA or the machine no GPU; "auto": cuda (device 0) when a GPU is
// present, else cpu. A name shardd does not have gives INVALID_ARGUMENT.
StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& device,
                                                 const BackendOptions& options = {});

// How many CUDA devices this process can use (0 without a CUDA build, a driver
// or a device). Never fails.
int NumCudaDevices();

// A buffer of n floats from one of a backend's allocators: its memory
// (Allocate/Free: DeviceBuffer) or its host memory (AllocateHost/FreeHost,
// pinned on device backends: HostBuffer). Movable, not copyable.
enum class BufferSide { kDevice, kHost };

template <BufferSide kSide>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  static StatusOr<BackendBuffer> Create(Backend* backend, int64_t n_floats);
  BackendBuffer(BackendBuffer&& o) noexcept { *this = std::move(o); }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept;
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { Release(); }

  float* data() const { return data_; }
  int64_t size() const { return n_; }
  int32_t* as_int() const { return reinterpret_cast<int32_t*>(data_); }

 private:
  void Release();

  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  int64_t n_ = 0;
};

using DeviceBuffer = BackendBuffer<BufferSide::kDevice>;
using HostBuffer = BackendBuffer<BufferSide::kHost>;
extern template class BackendBuffer<BufferSide::kDevice>;
extern template class BackendBuffer<BufferSide::kHost>;

}  // namespace shard
