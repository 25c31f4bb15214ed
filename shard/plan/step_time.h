// The step-time model: how long one optimizer step takes and what it yields.
//
//   compute   where the catalog has shardd's measured kernel rates for this
//             GPU and dtype (gpus.yaml measured:): GEMM FLOPs (6N per token,
//             +2N recomputed) at the measured GEMM rate, the attention
//             kernel's FLOPs (causal: 2·T·d per layer forward, 2.5x that
//             backward, as gpu_bench counts them) at the measured attention
//             rate, and the elementwise kernels' bytes (norms, RoPE, SwiGLU,
//             residual adds, the loss over the logits) at the memory
//             bandwidth x kStreamEfficiency. Otherwise the micro-batch's FLOPs
//             (6N + 12·L·d·T per token, plus one more forward with activation
//             checkpointing) at the dense peak x the stated train_efficiency
//   comm      FSDP collectives per micro-batch — all-gather in forward, again in
//             backward (full_shard), reduce-scatter of gradients — as ring
//             traffic (S-1)/S of the bytes over the cluster's collective
//             bandwidth; no_shard/hybrid add one gradient all-reduce per step
//   context   parallel.context_parallel C: a rank computes seq_len / C tokens
//             per sequence, and per layer exchanges K/V with its CP group
//             (cp_cost.h), exposed
//   overlap   with prefetch, collectives run beside compute: only the first
//             gather and the last reduce-scatter of a micro-batch, and any
//             excess of communication over compute, are exposed
//   optimizer AdamW reads/writes 28 bytes per parameter of the shard at the
//             device's memory bandwidth (+8 to zero the gradients and read
//             them for the norm), or the host's when offloaded, plus the PCIe
//             copies offloading adds
//
// MFU = model FLOPs (6N + 12·L·d·T per token, no recompute) per second over
// the GPUs' dense peak; HFU counts the recompute too.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "shard/plan/hardware.h"
#include "shard/plan/workload.h"

namespace shard::plan {

struct StepTime {
  double model_flops_per_token = 0;     // what MFU counts
  double hardware_flops_per_token = 0;  // with recompute
  double peak_tflops = 0;               // per device, dense, compute dtype
  double efficiency = 0;                // fraction of peak: stated, or what the kernel rates imply
  bool from_kernels = false;            // priced from measured kernel rates (below)
  double gemm_tflops = 0, attention_tflops = 0;       // the measured rates used
  double gemm_s = 0, attention_s = 0, elementwise_s = 0;  // per micro-batch, from_kernels
  double collective_gbs = 0;            // per rank per direction

  double compute_s = 0;        // per micro-batch
  double comm_s = 0;           // per micro-batch, all collectives
  double exposed_comm_s = 0;   // per micro-batch, not hidden behind compute
  double cp_exchange_s = 0;    // per micro-batch, context parallelism's K/V exchange (in both above)
  double step_comm_s = 0;      // per step (gradient all-reduce across replicas)
  double optimizer_s = 0;      // per step
  double offload_s = 0;        // per step, exposed PCIe copies
  int64_t micro_batches = 1;   // per rank per step
  double step_s = 0;

  double tokens_per_s = 0;          // whole job
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double hfu = 0;
  std::string bottleneck;  // compute | communication | host optimizer | optimizer
};

StepTime EstimateStepTime(const Workload& w, const ClusterSpec& cluster);

// QLoRA's GEMMs dequantise NF4 weights on the fly; the fraction of the bf16
// GEMM rate they keep (stated assumption, see docs/planner-validation.md).
constexpr double kQloraGemmFactor = 0.6;
// AdamW touches p, g, m, v (read) and p, m, v (written): 7 words per parameter.
constexpr double kAdamWordsPerParam = 7;
// On the device, the step also zeroes the gradient shard and reads it once for
// the global norm: 2 more words per parameter.
constexpr double kGradPassWords = 2;
// Fraction of peak memory bandwidth a streaming AdamW reaches (device and host).
constexpr double kStreamEfficiency = 0.7;

}  // namespace shard::plan
