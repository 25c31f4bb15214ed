// The byte formulas against cases computed by hand (the arithmetic is in the
// comments), so a change to the model or to the engine's layout shows up here.
#include <gtest/gtest.h>

#include <algorithm>

#include "shard/plan/gather_sim.h"
#include "shard/plan/memory_model.h"
#include "shard/plan/step_time.h"

namespace shard::plan {
namespace {

LlamaConfig Preset(const char* name) { return *LlamaPreset(name); }

int64_t Item(const MemoryEstimate& m, const std::string& prefix) {
  int64_t s = 0;
  for (const auto& i : m.device)
    if (i.what.rfind(prefix, 0) == 0) s += i.bytes;
  return s;
}
int64_t HostItem(const MemoryEstimate& m, const std::string& prefix) {
  int64_t s = 0;
  for (const auto& i : m.host)
    if (i.what.rfind(prefix, 0) == 0) s += i.bytes;
  return s;
}

ClusterSpec OneNode(int gpus) {
  ClusterSpec c;
  c.gpu.memory_gib = 80;
  c.gpu.memory_bandwidth_gbs = 2000;
  c.gpu.tflops_bf16 = c.gpu.tflops_fp16 = 312;
  c.gpu.tflops_fp32 = 19.5;
  c.gpu.tflops_tf32 = 156;
  c.gpu.bf16 = true;
  c.gpu.nvlink_gbs = 600;
  c.gpu.train_efficiency = 0.72;
  c.gpus_per_node = gpus;
  c.intra_node = IntraNode::kNvSwitch;
  c.host = {1024, 64, 400};
  return c;
}

TEST(MemoryModelTest, TinyUnitsAndShards) {
  // tiny: vocab 512, d 128, ffn 352, 4 layers, 4 heads, 2 KV heads (head_dim 32).
  // embed 512*128 = 65,536; block = 2*128 (norms) + 128*128 (q) + 2*64*128 (k, v)
  //   + 128*128 (o) + 3*352*128 (mlp) = 184,576; head = 128 + 512*128 = 65,664.
  auto n = UnitNumels(Preset("tiny"));
  ASSERT_EQ(n.size(), 6u);
  EXPECT_EQ(n[0], 65536);
  EXPECT_EQ(n[1], 184576);
  EXPECT_EQ(n[5], 65664);
  EXPECT_EQ(ShardNumel(n, 1), 869504);  // all multiples of 4 already
  // 3 shards: ceil(65,536/3) = 21,846 -> 21,848 (multiple of 4); ceil(184,576/3) =
  // 61,526 -> 61,528; 65,664/3 = 21,888. Sum 21,848 + 4*61,528 + 21,888 = 289,848.
  EXPECT_EQ(ShardNumel(n, 3), 289848);
  EXPECT_EQ(PaddedNumel(n, 3), 3 * 289848);
}

TEST(MemoryModelTest, ActivationsMatchLlamaModelAllocate) {
  // tiny, micro-batch 2 x 16 = 32 rows; qkv = (4 + 2*2)*32 = 256; heads*hd = 128.
  ActivationElems a = Activations(Preset("tiny"), 2, 16, /*checkpointing=*/false);
  EXPECT_EQ(a.residuals, 5 * 32 * 128);                      // L+1 block inputs/outputs
  EXPECT_EQ(a.saved, 4 * 32 * (3 * 128 + 256 + 128 + 3 * 352));  // xn1, x_mid, xn2, qkv, attn, gu, h: 233,472
  EXPECT_EQ(a.saved, 233472);
  EXPECT_EQ(a.statistics, 4 * 32 * (2 + 4));  // rstd1, rstd2, lse per head
  EXPECT_EQ(a.final_norm, 32 * 128 + 32);
  EXPECT_EQ(a.logits, 32 * 512);
  EXPECT_EQ(a.scratch, 32 * (3 * 128 + 3 * 352 + 128 + 256));  // 58,368
  EXPECT_EQ(a.rope, 16 * 32);
  ActivationElems ac = Activations(Preset("tiny"), 2, 16, /*checkpointing=*/true);
  EXPECT_EQ(ac.saved, a.saved / 4);  // one set instead of L
  EXPECT_EQ(ac.residuals, a.residuals);
}

// The engine's two-byte activations (ModelOptions::activation_dtype) priced
// against what LlamaModel::Create allocates is checked in tests/unit/model
// (TwoByteActivationBytes) and by the simulator; here the formula itself on
// tiny (L = 4, d = 128, ffn 352, qkv 256, hq 128, 4 heads) at 32 rows.
TEST(MemoryModelTest, ActivationBytesByType) {
  const LlamaConfig c = Preset("tiny");
  const ActivationElems a = Activations(c, 2, 16, false);
  EXPECT_EQ(ActivationBytes(c, 2, 16, false, DType::kF32), (a.residuals + a.saved + a.statistics + a.final_norm) * 4);
  const int64_t set = 32 * (3 * 128 + 256 + 128 + 3 * 352), stats = 32 * 6;
  // L+1 residuals and L saved sets in 2 B; fp32: working set + block input,
  // per-layer statistics, the final norm.
  EXPECT_EQ(ActivationBytes(c, 2, 16, false, DType::kBF16),
            (5 * 32 * 128 + 4 * set) * 2 + (set + stats + 32 * 128) * 4 + 4 * stats * 4 + a.final_norm * 4);
  EXPECT_EQ(ActivationBytes(c, 2, 16, true, DType::kF16),
            5 * 32 * 128 * 2 + (set + stats + 32 * 128) * 4 + a.final_norm * 4);
}

TEST(MemoryModelTest, GatheredUnitsOfLlama2_7bOver8Ranks) {
  // llama2-7b, 8 shards: embed 131,072,000; block 202,383,360 (shard 25,297,920);
  // head 131,076,096 (shard 16,384,512); all divide evenly, so padded = numel.
  // Worst moment: backward of a middle block l, with block l-1 prefetched and
  // block l+1's reduce-scatter in flight:
  //   params 2 x 202,383,360 = 404,766,720
  //   grads  2 x (202,383,360 + 25,297,920) = 455,362,560
  GatherPeak g = GatheredPeak(Preset("llama2-7b"), 8, /*prefetch=*/1, /*keep_forward=*/false);
  EXPECT_EQ(g.params, 404766720);
  EXPECT_EQ(g.grads, 455362560);
  EXPECT_EQ(g.total, 860129280);
  // Without prefetch one block fewer is gathered.
  GatherPeak np = GatheredPeak(Preset("llama2-7b"), 8, 0, false);
  EXPECT_EQ(np.params, 202383360);
  // shard_grad_op keeps each forward gather until that unit's backward is done.
  // Worst moment: backward of the last block, right after the head's: every
  // unit but the head (6,738,415,616 - 131,076,096) is still gathered, with
  // the last block's gradient (202,383,360 + 25,297,920) and the head's
  // reduce-scatter in flight (131,076,096 + 16,384,512).
  GatherPeak z2 = GatheredPeak(Preset("llama2-7b"), 8, 1, true);
  EXPECT_EQ(z2.params, 6607339520);
  EXPECT_EQ(z2.grads, 375141888);
}

TEST(MemoryModelTest, TiedEmbeddingKeepsItsGradientThroughBackward) {
  // tiny over 2 ranks: embed 65,536; block 184,576 (shard 92,288). Untied, the
  // worst moment is a middle block's backward: 2 blocks gathered (369,152) +
  // 2 x (184,576 + 92,288) gradients (553,728) = 922,880 — exactly what
  // FsdpRuntime counted in CpuMemoryTest.GatheredBytesMatchTheRuntimeCount.
  LlamaConfig c = Preset("tiny");
  GatherPeak untied = GatheredPeak(c, 2, 1, false);
  EXPECT_EQ(untied.total, 922880);
  // Tied, the head's backward adds into the embedding's gradient, which is
  // reduce-scattered only after the embedding backward: +65,536 all along.
  c.tie_word_embeddings = true;
  GatherPeak tied = GatheredPeak(c, 2, 1, false);
  EXPECT_EQ(tied.total, 922880 + 65536);
}

TEST(MemoryModelTest, FullShardStatesAre16BytesPerParameterShard) {
  // llama2-7b over 8 GPUs: shard = 16,384,000 + 32*25,297,920 + 16,384,512 =
  // 842,301,952 elements; fp32 params + grads + Adam m, v = 16 B each.
  Workload w;
  w.model = Preset("llama2-7b");
  w.world = 8;
  w.compute = DType::kBF16;
  MemoryEstimate m = EstimateMemory(w, OneNode(8));
  EXPECT_EQ(Item(m, "parameter shard"), 842301952LL * 4);
  EXPECT_EQ(Item(m, "gradient shard"), 842301952LL * 4);
  EXPECT_EQ(Item(m, "AdamW"), 842301952LL * 8);
  EXPECT_EQ(Item(m, "gathered parameters"), 404766720LL * 2);  // bf16
  EXPECT_EQ(Item(m, "unsharded gradients"), 455362560LL * 2);
  // No offload: the host holds only the worker processes and, while loading,
  // each rank's buffer of the largest unit shard (a block: 25,297,920 x 4 B).
  EXPECT_EQ(m.host_total, 8 * kGpuWorkerHostBytes + 8 * 25297920LL * 4);
}

// shardd's GPU runtime as built (Workload::fp32_transients) keeps some
// transients in fp32: twice the design point's bytes for the unsharded
// gradients, activations (statistics are fp32 in both) and backward scratch,
// plus the GEMM operand casts: A up to the gate/up gradient [4096, 2*11008]
// and B up to an activation [4096, 11008], 2 B each (weights are B operands
// in bf16 already). The gathered units are bf16 compute copies, as designed.
TEST(MemoryModelTest, AsBuiltRuntimeHoldsFp32Transients) {
  Workload w;
  w.model = Preset("llama2-7b");
  w.world = 8;
  w.micro_batch = 2;
  w.seq_len = 2048;
  w.compute = DType::kBF16;
  w.activation_checkpointing = true;
  const MemoryEstimate design = EstimateMemory(w, OneNode(8));
  w.fp32_transients = true;
  const MemoryEstimate built = EstimateMemory(w, OneNode(8));
  EXPECT_EQ(Item(built, "gathered parameters"), 404766720LL * 2);
  EXPECT_EQ(Item(built, "gathered parameters"), Item(design, "gathered parameters"));
  EXPECT_EQ(Item(built, "unsharded gradients"), 2 * Item(design, "unsharded gradients"));
  EXPECT_EQ(Item(built, "backward scratch"), 2 * Item(design, "backward scratch"));
  // The kept activations are bf16 as built too (issue 19 item 2): the
  // residuals alike; the one checkpointing set is the fp32 working set (2 B
  // more per element of 3d + qkv + hq + 3 ffn per token), plus the fp32 block
  // input (d) and the fp32 final norm (d + 1: 2 B more).
  const int64_t rows = 4096;
  EXPECT_EQ(Item(built, "activations") - Item(design, "activations"),
            rows * (3 * 4096 + 3 * 4096 + 4096 + 3 * 11008) * 2 + rows * 4096 * 4 + rows * (4096 + 1) * 2);
  EXPECT_EQ(Item(built, "activations"), ActivationBytes(w.model, 2, 2048, true, DType::kBF16));
  EXPECT_EQ(Item(built, "GEMM operand casts"), (rows * 2 * 11008 + rows * 11008) * 2);
  EXPECT_EQ(Item(design, "GEMM operand casts"), 0);
  EXPECT_EQ(Item(built, "parameter shard"), Item(design, "parameter shard")) << "shards are not transients";
  EXPECT_GT(built.device_total, design.device_total);
  // LoRA as built holds its frozen base in the compute dtype's shards (as
  // the design point does) but its transients in fp32.
  w.method = Method::kLora;
  const MemoryEstimate lora_built = EstimateMemory(w, OneNode(8));
  w.fp32_transients = false;
  const MemoryEstimate lora_design = EstimateMemory(w, OneNode(8));
  EXPECT_GT(Item(lora_built, "frozen base shard (bf16"), 0);
  EXPECT_EQ(Item(lora_built, "frozen base shard (bf16"), Item(lora_design, "frozen base shard (bf16"));
  EXPECT_EQ(Item(lora_built, "gradient shard"), 0);
  EXPECT_EQ(Item(lora_built, "AdamW moments"), 0);
  EXPECT_GT(lora_built.device_total, lora_design.device_total);
}

// The adapters and the LoRA path's buffers, by hand for llama2-7b (d 4096,
// ffn 11008, 32 layers, MHA): rank 16 on q and v is 16 x (4096 + 4096) x 2 x
// 32 parameters; the path holds the dropout input and its gradient [rows,
// 4096], t and g [rows, 16], and one saved t per adapter of the one set kept
// under activation checkpointing.
TEST(MemoryModelTest, LoraAdaptersAndPathBuffers) {
  const LlamaConfig c = Preset("llama2-7b");
  EXPECT_EQ(LoraParams(c, 16, {LoraTarget::kQ, LoraTarget::kV}), 16LL * 8192 * 2 * 32);
  EXPECT_EQ(LoraParams(c, 8), 8LL * 32 * ((4096 + 4096) * 4 + 3 * (4096 + 11008)));
  const int64_t rows = 2048;
  const LoraActivationElems a = LoraActivations(c, 16, {LoraTarget::kQ, LoraTarget::kV}, rows, true, true);
  EXPECT_EQ(a.scratch, 2 * rows * 4096 + 2 * rows * 16);
  EXPECT_EQ(a.saved, 2 * rows * 16);
  // Without dropout the adapters read x itself: no [rows, in] buffers.
  EXPECT_EQ(LoraActivations(c, 16, {LoraTarget::kQ}, rows, true, false).scratch, 2 * rows * 16);
  EXPECT_EQ(LoraActivations(c, 16, {LoraTarget::kDown}, rows, false, false).saved, 32 * rows * 16);
  // Dropout's input and gradient are as wide as the widest adapter input (down: ffn).
  EXPECT_EQ(LoraActivations(c, 16, {LoraTarget::kDown}, rows, false, true).scratch, 2 * rows * 11008 + 2 * rows * 16);
  // NF4: 4 bits + a 32-bit absmax per 64 weights; double quantised: an
  // 8-bit code per block and a 32-bit scale per 256 blocks.
  EXPECT_DOUBLE_EQ(Nf4Bits(64, false), 4.5);
  EXPECT_NEAR(Nf4Bits(64, true), 4.127, 5e-4);

  Workload w;
  w.model = c;
  w.method = Method::kLora;
  w.lora_rank = 16;
  w.lora_targets = {LoraTarget::kQ, LoraTarget::kV};
  w.world = 8;
  w.micro_batch = 1;
  w.seq_len = 2048;
  w.activation_checkpointing = true;
  w.fp32_transients = true;
  w.lora_dropout = 0.05;
  const MemoryEstimate m = EstimateMemory(w, OneNode(8));
  EXPECT_EQ(Item(m, "LoRA adapters"), LoraParams(c, 16, w.lora_targets) * 16);
  EXPECT_EQ(Item(m, "LoRA path buffers"), a.total() * 4);
  EXPECT_EQ(Item(m, "frozen base shard (bf16"), ShardNumel(UnitNumels(c), 8) * 2);
  EXPECT_EQ(w.base_dtype(), DType::kBF16);
  // QLoRA: the block linears at NF4's bits, the rest in bf16.
  w.method = Method::kQlora;
  w.qlora_bits = Nf4Bits(64, true);
  const MemoryEstimate q = EstimateMemory(w, OneNode(8));
  EXPECT_LT(Item(q, "frozen base shard (NF4"), Item(m, "frozen base shard (bf16") / 3);
  EXPECT_GT(Item(q, "dequantised unit"), 0);
}

TEST(MemoryModelTest, OptimizerOffloadMoves16BytesToTheHost) {
  Workload w;
  w.model = Preset("llama2-7b");
  w.world = 8;
  w.offload.optimizer = true;
  MemoryEstimate m = EstimateMemory(w, OneNode(8));
  EXPECT_EQ(Item(m, "parameter shard"), 842301952LL * 2);  // the bf16 copy to gather from
  EXPECT_EQ(Item(m, "gradient shard"), 0);
  EXPECT_EQ(Item(m, "AdamW"), 0);
  EXPECT_EQ(HostItem(m, "offloaded"), 8 * 842301952LL * 16);  // 8 ranks on the node
  // Pure bf16 (torchtune-style) with parameters offloaded too: 8 B per parameter on the host.
  w.fp32_master = false;
  w.offload.params = true;
  MemoryEstimate p = EstimateMemory(w, OneNode(8));
  EXPECT_EQ(Item(p, "parameter shard"), 0);
  EXPECT_EQ(HostItem(p, "offloaded"), 8 * 842301952LL * 8);
}

TEST(MemoryModelTest, AsyncCheckpointSnapshotOnlyOnWriters) {
  Workload w;
  w.model = Preset("tiny");
  w.world = 4;
  w.strategy = ShardStrategy::kNoShard;  // only rank 0 writes, the whole model
  w.async_checkpoint = true;
  MemoryEstimate m = EstimateMemory(w, OneNode(4));
  EXPECT_EQ(HostItem(m, "async checkpoint"), 869504LL * 12);
  w.strategy = ShardStrategy::kFullShard;  // every rank writes its quarter
  MemoryEstimate f = EstimateMemory(w, OneNode(4));
  EXPECT_EQ(HostItem(f, "async checkpoint"), 4 * ShardNumel(UnitNumels(w.model), 4) * 12);
}

TEST(MemoryModelTest, LoraAdapterCount) {
  // Rank 16 on q, k, v, o, gate, up, down of llama2-7b: per layer
  // (4096+4096) + 2(4096+4096) + (4096+4096) + 2(4096+11008) + (11008+4096) = 78,080
  // x 16 x 32 layers = 39,976,960 (what PEFT reports for this setup).
  EXPECT_EQ(LoraParams(Preset("llama2-7b"), 16), 39976960);
}

TEST(MemoryModelTest, CpuEngineIsExact) {
  // tiny on the CPU engine, one rank, micro-batch 2 x 16: every buffer fp32.
  Workload w;
  w.model = Preset("tiny");
  w.cpu_engine = true;
  w.compute = DType::kF32;
  w.micro_batch = 2;
  w.seq_len = 16;
  ClusterSpec c = LocalCpuCluster(CpuRates{}, 1);
  MemoryEstimate m = EstimateMemory(w, c);
  ActivationElems a = Activations(w.model, 2, 16, false);
  const int64_t expected = 869504LL * 16 +
                           (a.residuals + a.saved + a.statistics + a.final_norm + a.logits + a.scratch + a.rope) * 4 +
                           6 * 32 * 4 + m.device_fixed;
  EXPECT_EQ(m.device_total, expected);
  EXPECT_EQ(Item(m, "gathered"), 0);  // one rank: no gathers
}

// The Gloo communicator keeps its ring scratch (two blocks of the largest
// reduce-scatter or all-reduce) for the process: the CPU engine's peak at W >
// 1 holds it (issue 28: a 162M model at W = 4 peaked 77 MiB above the plan).
TEST(MemoryModelTest, CpuEngineCountsTheGlooRingScratch) {
  Workload w;
  w.model = Preset("tiny");
  w.cpu_engine = true;
  w.compute = DType::kF32;
  w.micro_batch = 2;
  w.seq_len = 16;
  EXPECT_EQ(Item(EstimateMemory(w, LocalCpuCluster(CpuRates{}, 1)), "Gloo ring scratch"), 0);  // one rank: no ring
  int64_t largest = 0;
  for (int64_t n : UnitNumels(w.model)) largest = std::max(largest, Layout(n, 4).shard_numel);
  w.world = 4;  // full_shard: reduce-scatter blocks of a unit's shard, fp32
  EXPECT_EQ(Item(EstimateMemory(w, LocalCpuCluster(CpuRates{}, 4)), "Gloo ring scratch"), 2 * largest * 4);
  w.reduce = DType::kBF16;  // a two-byte reduce_dtype: two-byte blocks
  EXPECT_EQ(Item(EstimateMemory(w, LocalCpuCluster(CpuRates{}, 4)), "Gloo ring scratch"), 2 * largest * 2);
  w.reduce = DType::kF32;
  w.strategy = ShardStrategy::kNoShard;  // all-reduce of whole units: blocks of a quarter unit
  int64_t quarter = 0;
  for (int64_t n : UnitNumels(w.model)) quarter = std::max(quarter, (Layout(n, 1).shard_numel + 3) / 4);
  EXPECT_EQ(Item(EstimateMemory(w, LocalCpuCluster(CpuRates{}, 4)), "Gloo ring scratch"), 2 * quarter * 4);
}

// A worker of a build with the CUDA backend maps the CUDA libraries on a CPU
// job too: a fixed item, in device_fixed, only in such a build.
TEST(MemoryModelTest, CpuEngineCountsTheLinkedCudaLibrariesOnlyWhenBuilt) {
  Workload w;
  w.model = Preset("tiny");
  w.cpu_engine = true;
  const MemoryEstimate m = EstimateMemory(w, LocalCpuCluster(CpuRates{}, 1));
  EXPECT_EQ(Item(m, "CUDA libraries"), kCpuWorkerCudaLibBytes);
#ifdef SHARDD_PLAN_WORKER_LINKS_CUDA
  EXPECT_GT(kCpuWorkerCudaLibBytes, 0);
#else
  EXPECT_EQ(kCpuWorkerCudaLibBytes, 0);
#endif
}

// The engine's loss holds one chunk of fp32 logits: llama3-8b at micro-batch
// 2 x 2048 has 4096 x 128256 x 4 B = 2,101,346,304 B unchunked and
// 523 x 128256 x 4 B = 268,311,552 B with auto chunks (<= 256 MiB).
TEST(MemoryModelTest, LogitsAreOneLossChunk) {
  Workload w;
  w.model = Preset("llama3-8b");
  w.world = 8;
  w.compute = DType::kBF16;
  w.micro_batch = 2;
  w.seq_len = 2048;
  EXPECT_EQ(Item(EstimateMemory(w, OneNode(8)), "logits"), 523LL * 128256 * 4);
  w.loss_chunk_rows = 512;
  EXPECT_EQ(Item(EstimateMemory(w, OneNode(8)), "logits"), 512LL * 128256 * 4);
  w.loss_chunk_rows = 1 << 20;  // capped at the rows: unchunked
  EXPECT_EQ(Item(EstimateMemory(w, OneNode(8)), "logits"), 4096LL * 128256 * 4);
  // The CPU engine's line too.
  w.loss_chunk_rows = 0;
  w.cpu_engine = true;
  w.compute = DType::kF32;
  w.world = 1;
  EXPECT_EQ(Item(EstimateMemory(w, LocalCpuCluster(CpuRates{}, 1)), "logits"), 523LL * 128256 * 4);
}

TEST(StepTimeTest, Llama2_7bOnEightA100s) {
  // 6N + 12 L d T with N = 6,738,415,616 - 131,072,000 (input embedding) =
  // 6,607,343,616 and 12*32*4096*2048 = 3,221,225,472: 42,865,287,168 per token.
  Workload w;
  w.model = Preset("llama2-7b");
  w.world = 8;
  w.micro_batch = 1;
  w.seq_len = 2048;
  w.global_batch = 8;
  StepTime t = EstimateStepTime(w, OneNode(8));
  EXPECT_DOUBLE_EQ(t.model_flops_per_token, 42865287168.0);
  // 2048 tokens at 312 TFLOP/s x 0.72.
  EXPECT_NEAR(t.compute_s, 2048 * 42865287168.0 / (312e12 * 0.72), 1e-9);
  // Two all-gathers and one reduce-scatter of 6,738,415,616 bf16 elements,
  // 7/8 of it crossing each rank's link at 300 GB/s x 0.8.
  EXPECT_NEAR(t.comm_s, 3 * 6738415616.0 * 2 * 7 / 8 / 240e9, 1e-9);
  EXPECT_LT(t.exposed_comm_s, t.comm_s);  // prefetch hides most of it
  // Activation checkpointing adds one forward: 2N + 4 L d T per token.
  w.activation_checkpointing = true;
  StepTime ac = EstimateStepTime(w, OneNode(8));
  EXPECT_DOUBLE_EQ(ac.hardware_flops_per_token, 42865287168.0 + 2 * 6607343616.0 + 3221225472.0 / 3);
  EXPECT_NEAR(ac.mfu / t.mfu, t.step_s / ac.step_s, 1e-9);
  EXPECT_GT(t.mfu, 0.6);
  EXPECT_LT(t.mfu, 0.72);
}

TEST(FormatTest, Bytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 20), "3.0 MiB");
}

// The families' extra tensors are priced: qwen2's biases in the parameters
// (and the ones vector), qwen3's norms in the parameters and its pre-norm q/k
// heads in the saved activations; attention FLOPs follow H x head_dim.
TEST(MemoryModelTest, FamilyExtrasArePriced) {
  LlamaConfig llama = *LlamaPreset("tiny");
  LlamaConfig q2 = *LlamaPreset("tiny-qwen2"), q3 = *LlamaPreset("tiny-qwen3");
  q2.tie_word_embeddings = false;
  const int64_t qkv = llama.qkv_dim();
  EXPECT_EQ(q2.NumParams() - llama.NumParams(), llama.num_layers * qkv);
  int64_t sum = 0;
  for (int64_t n : UnitNumels(q2)) sum += n;
  EXPECT_EQ(sum, q2.NumParams());
  const ActivationElems a = Activations(llama, 2, 64, false), b = Activations(q2, 2, 64, false);
  EXPECT_EQ(b.scratch - a.scratch, 2 * 64);
  const ActivationElems c = Activations(q3, 2, 64, false);
  const int64_t hd = q3.head_dim(), heads = q3.num_heads + q3.num_kv_heads;
  EXPECT_EQ(hd, 48);
  // Against a llama of the same head_dim: the saved pre-norm heads and their rstd.
  LlamaConfig same = q3;
  same.family = ModelFamily::kLlama;
  const ActivationElems d = Activations(same, 2, 64, false);
  EXPECT_EQ(c.saved - d.saved, q3.num_layers * 128 * heads * hd);
  EXPECT_EQ(c.statistics - d.statistics, q3.num_layers * 128 * heads);
  EXPECT_EQ(q3.NumParams() - same.NumParams(), q3.num_layers * 2 * hd);
  EXPECT_DOUBLE_EQ(q3.TrainFlopsPerToken(64) - 6.0 * q3.NumMatmulParams(), 12.0 * q3.num_layers * 4 * 48 * 64);
}

}  // namespace
}  // namespace shard::plan
