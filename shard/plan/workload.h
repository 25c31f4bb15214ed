// What one plan evaluates: the model, how it is trained, sharded and batched.
// Plain data — a job file maps onto it (planner.h), and the validation against
// published figures builds it directly, so it can express setups shardd's job
// schema does not (pure bf16, parameter offload, LoRA/QLoRA, chunked loss).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shard/spec/llama_config.h"
#include "shard/spec/peft_config.h"
#include "shard/spec/shard_layout.h"
#include "shard/tensor/dtype.h"

namespace shard::plan {

// Full fine-tuning trains every weight; LoRA freezes the base (in `compute`
// precision) and trains rank-r adapters on every linear layer; QLoRA also
// stores the frozen linear weights as 4-bit NF4 with double-quantised scales.
enum class Method { kFull, kLora, kQlora };
const char* MethodName(Method m);

// Where the sharded training state lives.
struct Offload {
  // The fp32 master shard, fp32 gradient shard and AdamW moments live in
  // pinned host memory and AdamW runs on the CPU (DeepSpeed's
  // offload_optimizer). The GPU keeps a `compute`-precision copy of its
  // parameter shard to all-gather from; each unit's reduce-scattered gradient
  // is copied down and accumulated on the host.
  bool optimizer = false;
  // The compute-precision parameter shard lives on the host too and is copied
  // up before each all-gather (DeepSpeed offload_param, FSDP CPUOffload).
  // Not expressible in a job file yet; used to plan published setups.
  bool params = false;
};

struct Workload {
  std::string model_name;  // preset or folder, for reports
  LlamaConfig model;
  Method method = Method::kFull;
  int lora_rank = 16;
  // peft.target_modules: the linears that get adapters (all seven by default).
  std::vector<LoraTarget> lora_targets = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
                                          LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};
  double lora_dropout = 0;  // peft.dropout (> 0: the adapter inputs are dropped out)
  // Bits per NF4 weight with its block's scale (Nf4Bits in adapter_memory.h):
  // the default is blocks of 64 with double-quantised scales.
  double qlora_bits = 4.127;  // NF4 + one fp8 scale per 64 weights + one fp32 per 256 scales

  // The CPU engine (resources.device: cpu): fp32 throughout, buffers exactly
  // as LlamaModel/FsdpRuntime/Trainer allocate them, device memory = host RAM.
  bool cpu_engine = false;
  DType compute = DType::kBF16;  // gathered parameters, activations, unsharded gradients
  // compute fp32: GEMMs on TF32 tensor cores (the engine allows TF32 unless
  // train.precision is fp32, which asks for strict fp32 products).
  bool tf32 = true;
  // true: fp32 master weights, fp32 gradient shard and fp32 AdamW moments
  // (shardd's mixed precision). false: "pure" low precision, everything in
  // `compute` (torchtune's dtype: bf16, LLaMA-Factory's pure_bf16).
  bool fp32_master = true;
  // GPU plans of shardd jobs: the runtime as built keeps some transients in
  // fp32 — backward scratch and unsharded gradients (gathered units and their
  // compute copies, the wire and the kept activations, with one fp32 working
  // set, are in `compute`: ActivationBytes) — and casts each GEMM's
  // activation operands into two-byte scratch (weights are B operands in
  // `compute` already: GemmArgs::b_dtype). false: the design
  // point, everything transient in `compute` (what the published trainers
  // do, and what the validation against their figures models). LoRA and
  // QLoRA hold their frozen base in `compute` (base_dtype()).
  bool fp32_transients = false;
  // parallel.reduce_dtype. As built, a two-byte one also holds a sharded
  // decoder block's unsharded gradient in that type while the model computes
  // it (UnitAccess::GradBufferStoreOnce, through a 64 MiB fp32 chunk); the
  // embedding, head and qwen2/qwen3 blocks stay fp32 until their reduce-scatter.
  DType reduce = DType::kF32;

  ShardStrategy strategy = ShardStrategy::kFullShard;
  int world = 1;
  int shard_group_size = 0;  // hybrid_shard (0 = world)
  bool activation_checkpointing = false;
  Offload offload;

  int64_t micro_batch = 1;   // sequences per forward/backward per rank
  int64_t seq_len = 2048;
  // parallel.context_parallel: each sequence split over C ranks (cp_cost.h);
  // a rank holds seq_len / C tokens of each, and world / C ranks read data.
  int context_parallel = 1;
  int64_t global_batch = 1;  // sequences per optimizer step, all ranks
  // preference: jobs train on pairs of rows (chosen, rejected): 2, and
  // micro_batch and global_batch above count rows (2 x the job file's pairs).
  int rows_per_item = 1;
  // dpo/ipo: the reference pass over this many training pairs before step 1
  // (preference_cost.h); 0 = pairs unknown, -1 = no reference (not dpo/ipo).
  int64_t reference_pairs = -1;
  int prefetch = 1;          // units all-gathered ahead of the one computing (0 = none)
  // 0: the engine's loss: fp32 logits for the whole micro-batch, turned into
  // their gradient in place. N: logits kept in `compute` and upcast N chunks
  // at a time (torchtune's CEWithChunkedOutputLoss).
  int ce_chunks = 0;
  // ce_chunks 0: rows of logits per chunk of the engine's loss
  // (train.loss_chunk_rows; 0 = auto, under 256 MiB). Modelling a trainer that
  // holds every row's logits (HF Trainer): a value >= micro_batch x seq_len.
  int64_t loss_chunk_rows = 0;
  bool async_checkpoint = false;  // periodic checkpoints snapshot the shard to host memory first
  int checkpoint_keep_last = 0;   // committed steps kept on disk (checkpoint.keep_last; 0 = no checkpoints)
  // checkpoint.memory: committed steps kept in tmpfs (keep_last; 0 = no memory
  // tier) and partner copies on another node (memory_tier_cost.h).
  int memory_tier_keep_last = 0;
  int memory_tier_replicas = 0;
  // fp32_master: the dtype of the master weights and AdamW moments
  // (optim.state_dtype). kBF16 is built for offloaded state: 2 B each on the
  // host, updated with stochastic rounding (shard/optim/bf16_state.h).
  DType optimizer_state = DType::kF32;
  bool from_hf = false;           // starts from HF weights (each rank reads its own ranges, one unit shard at a time)

  int64_t micro_batches_per_step() const;  // gradient accumulation
  // Tokens of each sequence one rank holds (seq_len / context_parallel).
  int64_t local_seq_len() const { return seq_len / std::max(1, context_parallel); }
  // Ranks that read distinct sequences (world / context_parallel).
  int data_ranks() const { return std::max(1, std::max(1, world) / std::max(1, context_parallel)); }
  int64_t tokens_per_step() const { return global_batch * seq_len; }
  // Bytes per element of master weights / moments / gradient shard.
  int64_t state_bytes() const { return fp32_master ? 4 : static_cast<int64_t>(DTypeSize(compute)); }
  // Offloaded host state per element: master, m, v in optimizer_state plus
  // the fp32 gradient shard (16 B as built).
  int64_t offloaded_state_bytes() const { return 3 * static_cast<int64_t>(DTypeSize(optimizer_state)) + 4; }
  int64_t compute_bytes() const { return static_cast<int64_t>(DTypeSize(compute)); }
  // LoRA/QLoRA: the dtype the frozen base's shard is held in (QLoRA: its
  // tensors other than the NF4 block linears): the compute dtype, as the
  // trainer stores it (bf16/fp16 shards under two-byte precisions).
  DType base_dtype() const { return compute; }
  // One line: "llama3-70b full, bf16, full_shard x8, AC, offload, mb 1 x 2048".
  std::string Describe() const;
};


}  // namespace shard::plan
