// The memory model: pure functions from a Workload (and the cluster's shape)
// to bytes per GPU and per host, itemised. The pieces mirror the engine:
//
//   shards      every FSDP unit (ParamLayout) is padded and cut by
//               ComputeShardLayout exactly as FsdpRuntime does; each rank keeps
//               its slice of parameters, gradients and AdamW moments.
//   gathered    units all-gathered for compute: the one in use plus `prefetch`
//               ahead, in the order the model acquires them; in backward also
//               the unsharded gradient of the unit computing and of the one
//               still being reduce-scattered (FsdpRuntime's bound).
//               shard_grad_op keeps every forward gather until the end of
//               the micro-batch (as FsdpRuntime does today).
//   activations exactly LlamaModel::Allocate's buffers for one micro-batch:
//               L+1 residuals, per-layer saved tensors (one set with
//               activation checkpointing), logits, backward scratch.
//   host        offloaded state, pinned staging, async checkpoint snapshots,
//               HF weights read while loading (one unit shard per rank), worker processes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shard/plan/adapter_memory.h"
#include "shard/plan/hardware.h"
#include "shard/plan/workload.h"

namespace shard::plan {

struct MemoryItem {
  std::string what;  // "parameter shard", "activations", ...
  int64_t bytes = 0;
  std::string how;   // the formula with its numbers, for reports
};

struct MemoryEstimate {
  std::vector<MemoryItem> device;  // per GPU (CPU engine: per rank, in host RAM)
  std::vector<MemoryItem> host;    // per node
  int64_t device_total = 0;
  int64_t host_total = 0;
  int64_t host_pinned = 0;  // part of host_total that is page-locked
  int ranks_per_node = 1;
  // CPU engine: the part of device_total the process holds regardless of the
  // job (runtime libraries, BLAS and kernel scratch) — excluded when comparing
  // with a measured RSS growth.
  int64_t device_fixed = 0;
  // GPU plans: the parts of device_total and host_total that are stated
  // allowances rather than buffers shardd allocates (the CUDA context,
  // cuBLASLt and NCCL buffers and allocator fragmentation per GPU; the worker
  // processes' own footprint per node). The memory simulator
  // (shard/sim/memory_sim.h) sees only the allocations, so it is compared with
  // the totals less these.
  int64_t device_allowance = 0;  // per GPU
  int64_t host_allowance = 0;    // per node
  // Checkpoint snapshots are held by the writer ranks only (replica 0 of each
  // shard): per writer, and how many of the node's ranks write. A writer
  // rank's host bytes are the node's other bytes over its ranks plus this.
  int64_t host_snapshot_per_writer = 0;
  int host_writers = 0;
  // GPU plans: the host bytes a writer rank allocates at its peak (its
  // offloaded state and staging, and the larger of its checkpoint snapshot
  // and its weight-loading buffer, which never coexist), allowances excluded.
  int64_t host_writer_alloc = 0;
  // checkpoint.memory: the tier's bytes per node (part of host_total) and how
  // they were counted; 0 without the tier.
  int64_t memory_tier_bytes = 0;
  std::string memory_tier_how;
};

// ---- Pieces (exposed for tests and the validation) -------------------------

// Real element counts of the model's FSDP units in order [embed, layers..., head].
std::vector<int64_t> UnitNumels(const LlamaConfig& config);
// Sum over units of ComputeShardLayout(numel, shards).shard_numel.
int64_t ShardNumel(const std::vector<int64_t>& unit_numels, int shards);
// Sum over units of ComputeShardLayout(numel, shards).padded.
int64_t PaddedNumel(const std::vector<int64_t>& unit_numels, int shards);

// Peak elements of gathered parameters and of unsharded gradients (+ the
// reduce-scatter landing shard) held at once, by the acquisition order of a
// Llama forward/backward (tied embeddings keep the embedding's gradient from
// the head's backward to the end).
struct GatherPeak {
  int64_t params = 0;  // elements of gathered parameters
  int64_t grads = 0;   // elements of unsharded gradients + landing shards
  int64_t total = 0;   // elements of both at the worst moment
};
GatherPeak GatheredPeak(const LlamaConfig& config, int shards, int prefetch, bool keep_forward_gathers);

// Elements of one micro-batch's activation buffers (LlamaModel::Allocate).
struct ActivationElems {
  int64_t residuals = 0;   // (L+1) x rows x d
  int64_t saved = 0;       // per-layer saved tensors, L sets (1 with checkpointing), excl. statistics
  int64_t statistics = 0;  // rstd and attention log-sum-exp of those sets (kept in fp32)
  int64_t final_norm = 0;  // final norm output + rstd
  int64_t logits = 0;      // rows x vocab
  int64_t scratch = 0;     // backward scratch (grad_a/b, scratch_d/ffn/attn/qkv/gu)
  int64_t rope = 0;        // cos/sin table
};
ActivationElems Activations(const LlamaConfig& config, int64_t micro_batch, int64_t seq_len, bool checkpointing);

// Bytes of the activations the engine keeps (residuals, saved sets,
// statistics, final norm) when ModelOptions::activation_dtype is `act`
// (train.precision): fp32 is ActivationElems x 4 B; a two-byte type holds the
// L+1 residuals and the saved sets in two bytes, plus one fp32 working set,
// one fp32 block input, the statistics (per saved set and for the working
// set), the final norm and QkvExtras' saved tensors in fp32.
int64_t ActivationBytes(const LlamaConfig& config, int64_t micro_batch, int64_t seq_len, bool checkpointing,
                        DType act);

// LoraParams, Nf4Bits and the LoRA buffers: shard/plan/adapter_memory.h.

// ---- The model -------------------------------------------------------------

MemoryEstimate EstimateMemory(const Workload& w, const ClusterSpec& cluster);

// Fixed allowances (stated, not measured on GPUs here): CUDA context, cuBLASLt
// workspace and NCCL channel buffers per GPU; a worker process's host
// footprint; the CPU engine's per-process runtime.
constexpr int64_t kGpuRuntimeBytes = int64_t{768} << 20;
constexpr int64_t kGpuWorkerHostBytes = int64_t{3} << 29;  // 1.5 GiB
constexpr int64_t kCpuProcessBytes = int64_t{48} << 20;
// A worker built with the CUDA backend maps cuBLASLt, cudart and NCCL even
// when its job runs on the CPU: measured on a CPU job's shardd-worker
// (/proc/PID/smaps), cuBLASLt alone holds 81 MiB of touched static data and
// 60 MiB of code and relocations. 0 in a build without CUDA.
#ifdef SHARDD_PLAN_WORKER_LINKS_CUDA
constexpr int64_t kCpuWorkerCudaLibBytes = int64_t{142} << 20;
#else
constexpr int64_t kCpuWorkerCudaLibBytes = 0;
#endif
// Fraction of the transient (activation + gathered) bytes lost to allocator
// fragmentation on GPUs.
constexpr double kAllocatorSlack = 0.10;
// Host memory the plan leaves to the OS, page cache and data loading.
constexpr double kHostReserveFraction = 0.10;

inline double GiB(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }
// "1.23 GiB", "512 MiB", "8.0 KiB".
std::string FormatBytes(int64_t bytes);

}  // namespace shard::plan
