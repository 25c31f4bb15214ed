#include "shard/plan/step_time.h"

#include <algorithm>

#include "shard/spec/shard_layout.h"
#include "shard/plan/memory_model.h"
#include "shard/plan/cp_cost.h"
#include "shard/plan/moe_model.h"

namespace shard::plan {
namespace {

// Fraction of the parameters that are block linear weights (what QLoRA quantises).
double LinearFraction(const LlamaConfig& c) {
  const double d = c.hidden_size, f = c.intermediate_size;
  const double hq = static_cast<double>(c.num_heads) * c.head_dim(), kv = static_cast<double>(c.num_kv_heads) * c.head_dim();
  // QLoRA's NF4 share: the attention and MLP matrices; a sparse layer's
  // experts (E x 3·d·fe), not its router.
  const double ns = c.is_moe() ? c.num_sparse_layers() : 0;
  const double experts = static_cast<double>(c.moe.num_experts) * 3 * d * c.moe.expert_intermediate_size +
                         3 * d * static_cast<double>(c.moe.shared_expert_intermediate_size);  // qwen2_moe's shared
  const double linear = c.num_layers * (d * hq * 2 + d * kv * 2) + (c.num_layers - ns) * 3 * d * f + ns * experts;
  return linear / static_cast<double>(c.NumParams());
}

// shardd's measured kernel rates for this workload (0 = not measured).
double MeasuredGemm(const GpuSpec& g, const Workload& w) {
  switch (w.compute) {
    case DType::kBF16: return g.gemm_tflops_bf16;
    case DType::kF16: return g.gemm_tflops_fp16;
    case DType::kF32: return w.tf32 && g.tflops_tf32 > 0 ? g.gemm_tflops_tf32 : g.gemm_tflops_fp32;
  }
  return 0;
}
// fp32 attention is the CUDA-core kernel whatever TF32 allows.
double MeasuredAttention(const GpuSpec& g, DType compute) {
  switch (compute) {
    case DType::kBF16: return g.attention_tflops_bf16;
    case DType::kF16: return g.attention_tflops_fp16;
    case DType::kF32: return g.attention_tflops_fp32;
  }
  return 0;
}

// Prices one micro-batch from the measured kernel rates (see the header).
void PriceFromKernels(const Workload& w, const ClusterSpec& cl, double gemm_tflops, StepTime* t) {
  const LlamaConfig& c = w.model;
  const double T = static_cast<double>(w.seq_len), L = c.num_layers;
  const double N = static_cast<double>(ActiveMatmulParams(c));  // a token runs k of E experts
  const double d = c.hidden_size, f = c.intermediate_size;
  const double hq = static_cast<double>(c.num_heads) * c.head_dim(), kv = 2.0 * c.num_kv_heads * c.head_dim();
  const bool ac = w.activation_checkpointing;
  const double tokens = static_cast<double>(w.micro_batch) * w.local_seq_len();  // this rank's chunks
  const double gemm_flops = (w.method == Method::kFull ? 6.0 : 4.0) * N + (ac ? 2.0 * N : 0.0);
  const double attn_fwd = 2.0 * T * d * L;  // causal: half of QK^T and PV
  const double attn_flops = 3.5 * attn_fwd + (ac ? attn_fwd : 0.0);
  t->gemm_tflops = gemm_tflops;
  t->attention_tflops = MeasuredAttention(cl.gpu, w.compute);
  const double attn_rate = t->attention_tflops > 0 ? t->attention_tflops : t->peak_tflops * cl.gpu.train_efficiency;
  // Elementwise bytes per token and layer: RMSNorm x2, RoPE on q and k,
  // residual adds, SwiGLU — forward 7d + 2(hq+kv) + 3f elements, backward
  // 12d + 2(hq+kv) + 5f — in the transients' element size; the loss reads
  // and rewrites the fp32 logits (3 passes over vocab).
  const double e = w.fp32_transients ? 4.0 : static_cast<double>(w.compute_bytes());
  const double fwd = 7 * d + 2 * (hq + kv) + 3 * f, bwd = 12 * d + 2 * (hq + kv) + 5 * f;
  const double elem_bytes = e * L * (fwd + bwd + (ac ? fwd : 0.0)) + 3.0 * 4.0 * c.vocab_size;
  t->gemm_s = tokens * gemm_flops / (gemm_tflops * 1e12);
  t->attention_s = tokens * attn_flops / (attn_rate * 1e12);
  t->elementwise_s = tokens * elem_bytes / (cl.gpu.memory_bandwidth_gbs * 1e9 * kStreamEfficiency);
  t->compute_s = t->gemm_s + t->attention_s + t->elementwise_s;
  t->from_kernels = true;
  t->efficiency = tokens * t->hardware_flops_per_token / (t->compute_s * t->peak_tflops * 1e12);
}

// FLOPs per token, the rate the ranks reach, and one micro-batch's compute
// time (from the measured kernel rates where the catalog has them).
void PriceCompute(const Workload& w, const ClusterSpec& cl, int ranks_here, StepTime* t) {
  const LlamaConfig& c = w.model;
  const double T = static_cast<double>(w.seq_len);
  const double N = static_cast<double>(ActiveMatmulParams(c));  // a token runs k of E experts
  // fwd 4 + bwd 8, per token, over the attention width H * head_dim (= d except with an explicit head_dim)
  const double attn = 12.0 * c.num_layers * static_cast<double>(c.num_heads) * c.head_dim() * T;
  // Frozen weights need no weight gradients: LoRA's matmuls cost 4N, not 6N.
  t->model_flops_per_token = (w.method == Method::kFull ? 6.0 : 4.0) * N + attn;
  const double recompute = w.activation_checkpointing ? 2.0 * N + attn / 3.0 : 0.0;
  t->hardware_flops_per_token = t->model_flops_per_token + recompute;
  if (w.cpu_engine) {
    const int cores = std::max(1, cl.host.cpu_cores / ranks_here);
    t->peak_tflops = cores * cl.cpu.fp32_gflops_per_core / 1000.0;
    t->efficiency = cl.cpu.train_efficiency;
  } else {
    t->peak_tflops = w.compute == DType::kF32 && !w.tf32 ? cl.gpu.tflops_fp32 : cl.gpu.PeakTflops(w.compute);
    t->efficiency = cl.gpu.train_efficiency * (w.method == Method::kQlora ? kQloraGemmFactor : 1.0);
  }
  const double rate = std::max(1e-9, t->peak_tflops * 1e12 * t->efficiency);
  // Context parallelism: a rank computes seq_len / C tokens, each attending
  // over the whole causal context (the attention FLOPs per token keep T).
  const double tokens_mb = static_cast<double>(w.micro_batch) * w.local_seq_len();
  t->compute_s = tokens_mb * t->hardware_flops_per_token / rate;
  const double gemm_measured = w.cpu_engine || w.method == Method::kQlora ? 0 : MeasuredGemm(cl.gpu, w);
  if (gemm_measured > 0) PriceFromKernels(w, cl, gemm_measured, t);
}

// The gathers and reduce-scatters of one micro-batch over a shard group of S
// ranks, and the part prefetch cannot hide behind compute.
void PriceMicroBatchComm(const Workload& w, const ClusterSpec& cl, int S, StepTime* t) {
  const LlamaConfig& c = w.model;
  const std::vector<int64_t> numels = UnitNumels(c);
  const double padded = static_cast<double>(PaddedNumel(numels, S));
  int64_t max_unit = 0;
  for (int64_t n : numels) max_unit = std::max(max_unit, n);
  const double cb = w.cpu_engine ? 4.0 : static_cast<double>(w.compute_bytes());
  double gathered_per_elem = cb;
  if (w.method == Method::kQlora) {
    const double lf = LinearFraction(c);
    gathered_per_elem = lf * w.qlora_bits / 8.0 + (1 - lf) * cb;
  }
  const bool full = w.method == Method::kFull;
  t->collective_gbs = cl.CollectiveGBs(S);
  if (S <= 1) return;
  const double ring = static_cast<double>(S - 1) / S;
  const double G = padded * gathered_per_elem;
  const double gathers = w.strategy == ShardStrategy::kShardGradOp ? 1 : 2;
  const double reduce = full ? padded * cb : 0;
  const double bw = t->collective_gbs * 1e9;
  t->comm_s = (gathers * G + reduce) * ring / bw;
  if (w.prefetch > 0) {
    // The first gather of a micro-batch has nothing to hide behind, nor does
    // the last reduce-scatter.
    const double unit = static_cast<double>(max_unit) * ring / bw;
    const double edges = unit * gathered_per_elem + (full ? unit * cb : 0);
    t->exposed_comm_s = std::min(t->comm_s, edges + std::max(0.0, t->comm_s - edges - t->compute_s));
  } else {
    t->exposed_comm_s = t->comm_s;
  }
}

// Once per step: the gradient all-reduce across replicas (or LoRA's across
// all ranks), the optimizer, and host offload. Returns the PCIe time of one
// micro-batch (offload), which compute may hide.
double PriceStepOnce(const Workload& w, const ClusterSpec& cl, int S, int R, int ranks_here, StepTime* t) {
  const LlamaConfig& c = w.model;
  const double shard = static_cast<double>(ShardNumel(UnitNumels(c), S));
  const double cb = w.cpu_engine ? 4.0 : static_cast<double>(w.compute_bytes());
  const double sb = w.cpu_engine ? 4.0 : static_cast<double>(w.state_bytes());
  const bool full = w.method == Method::kFull;
  const int world = std::max(1, w.world);
  if (R > 1 || (!full && world > 1)) {
    // no_shard / hybrid_shard: the fp32 gradient shard all-reduced across
    // replicas; LoRA: the adapters' gradients across all ranks.
    const double elems = full ? shard : static_cast<double>(LoraParams(c, w.lora_rank, w.lora_targets));
    const int n = full ? R : world;
    t->step_comm_s = 2.0 * (n - 1) / n * elems * (full ? sb : 4.0) / (cl.CollectiveGBs(world) * 1e9);
  }
  const double opt_elems = full ? shard : static_cast<double>(LoraParams(c, w.lora_rank, w.lora_targets));
  const double opt_bytes = kAdamWordsPerParam * (full ? sb : 4.0) * opt_elems;
  double pcie_mb = 0;
  if (w.cpu_engine) {
    t->optimizer_s = ranks_here * opt_bytes / (cl.cpu.mem_bandwidth_gbs * 1e9 * kStreamEfficiency);
  } else if (full && (w.offload.optimizer || w.offload.params)) {
    // CPU AdamW over every rank's shard on this host, bound by DRAM bandwidth;
    // gradients come down per micro-batch, updated parameters go up per step.
    t->optimizer_s = ranks_here * opt_bytes / (cl.host.mem_bandwidth_gbs * 1e9 * kStreamEfficiency);
    const double pcie = cl.gpu.PcieGBs() * 0.8 * 1e9;
    pcie_mb = shard * cb / pcie;
    if (w.offload.params) pcie_mb += 2 * shard * cb / pcie;
    t->offload_s = shard * cb / pcie;
  } else {
    // AdamW, plus one pass each to zero the gradient shard (ZeroGrads) and to
    // read it for the global norm (GradNormSquared).
    const double grad_passes = kGradPassWords * (full ? sb : 4.0) * opt_elems;
    t->optimizer_s = (opt_bytes + grad_passes) / (cl.gpu.memory_bandwidth_gbs * 1e9 * kStreamEfficiency);
  }
  return pcie_mb;
}

// The step's total, throughput, utilisation and what bounds it.
void Summarize(const Workload& w, double exposed_pcie_mb, StepTime* t) {
  const int world = std::max(1, w.world);
  t->step_s = t->micro_batches * (t->compute_s + t->exposed_comm_s + exposed_pcie_mb) + t->step_comm_s +
              t->optimizer_s + t->offload_s;
  // The slowest rank sets the pace; every rank processes its micro-batches.
  const double tokens =
      static_cast<double>(t->micro_batches) * w.micro_batch * static_cast<double>(w.local_seq_len()) * world;
  t->tokens_per_s = tokens / t->step_s;
  t->tokens_per_s_per_gpu = t->tokens_per_s / world;
  t->mfu = t->tokens_per_s * t->model_flops_per_token / (world * t->peak_tflops * 1e12);
  t->hfu = t->tokens_per_s * t->hardware_flops_per_token / (world * t->peak_tflops * 1e12);

  const double compute = t->micro_batches * t->compute_s;
  const double comm = t->micro_batches * t->exposed_comm_s + t->step_comm_s;
  const double opt = t->optimizer_s + t->offload_s + t->micro_batches * exposed_pcie_mb;
  if (compute >= comm && compute >= opt) t->bottleneck = "compute";
  else if (comm >= opt) t->bottleneck = "communication";
  else t->bottleneck = (w.offload.optimizer || w.offload.params) ? "host optimizer" : "optimizer";
}

}  // namespace

StepTime EstimateStepTime(const Workload& w, const ClusterSpec& cl) {
  StepTime t;
  auto shape = GroupShapeFor(w.strategy, std::max(1, w.world), w.shard_group_size);
  const int S = shape.ok() ? shape->shard_size : std::max(1, w.world);
  const int R = shape.ok() ? shape->replicas : 1;
  const int ranks_here = w.cpu_engine ? std::max(1, w.world) : std::min(std::max(1, w.world), cl.gpus_per_node);
  PriceCompute(w, cl, ranks_here, &t);
  PriceMicroBatchComm(w, cl, S, &t);
  // The K/V exchange of context parallelism: the attention waits for it.
  t.cp_exchange_s = CpExchangeSeconds(w, cl);
  t.comm_s += t.cp_exchange_s;
  t.exposed_comm_s += t.cp_exchange_s;
  t.micro_batches = w.micro_batches_per_step();
  const double pcie_mb = PriceStepOnce(w, cl, S, R, ranks_here, &t);
  Summarize(w, std::max(0.0, pcie_mb - t.compute_s), &t);
  return t;
}

}  // namespace shard::plan
