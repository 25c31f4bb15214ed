// A sparse block's MLP (qwen3_moe, mixtral, qwen2_moe): a router picks k of E experts per
// token, as transformers does (softmax in fp32, top-k, renormalised iff
// norm_topk_prob; dropless), each expert is a SwiGLU MLP, and the outputs are
// added back weighted. The token rows are grouped by expert once per call
// (Backend::MoeRoute's permutation), so each active expert runs one GEMM over
// its contiguous rows, forward and backward; the combine is a weighted
// scatter-add. Knows shapes, not ranks: the experts live in the block's FSDP
// unit (shard/spec/param_layout.h: kRouter, ExpertTensor).
//
// qwen2_moe adds a shared expert (a SwiGLU of shared_expert_intermediate_size
// over every token, gate and up fused) scaled per token by
// g = sigmoid(x · shared_expert_gateᵀ), g cast to the compute dtype, and
// added to the routed output, as transformers' Qwen2MoeSparseMoeBlock. The
// scaled add is MoeUnpermute with k = 1 over the identity permutation
// (weights g), its backward MoeUnpermuteBackward (dy and dg); the n gate
// values go through the host for the sigmoid and its derivative.
//
// The auxiliary load-balancing loss (transformers' load_balancing_loss_func,
// all sparse layers of a micro-batch together, padding excluded) needs every
// layer's routing before any backward: Forward counts each layer's
// assignments over the real tokens; SetAuxGradient turns the counts into the
// loss and its gradient factor, which Backward adds to the router's softmax.
//
// Thread-safety: one thread at a time (owns scratch buffers).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/model/lora_linear.h"
#include "shard/model/unit_weights.h"
#include "shard/spec/llama_config.h"

namespace shard {

// LoRA on one sparse layer's experts (LoraLayout::experts): expert j's
// adapter runs over j's contiguous rows, x_j·A_jᵀ·B_jᵀ added into the same
// output columns as its base GEMM (gate, up into the fused [m, 2fe]; down
// into [m, d]). The saved t is recomputed in the backward (no extra memory).
// LoraLayout::moe_tensors likewise: the router's adapter adds into the router
// logits [n, E] before the softmax (its gradient is the logits' gradient the
// backward already forms: the combine weights, the aux loss, the z-loss);
// qwen2_moe's shared expert's into its fused [n, 2fs] and [n, d] outputs, its
// gate's into the [n, 1] logit before the sigmoid.
struct MoeLora {
  const LoraLayout* layout = nullptr;
  const float* adapter = nullptr;  // the layer's buffer
  float* adapter_grad = nullptr;   // null: no adapter gradients
  float scale = 1.0f;
  float dropout = 0.0f;            // 0: none (eval)
  uint64_t dropout_seed = 0;       // LoraBinding::dropout_seed
  LoraScratch* scratch = nullptr;
};

class MoeMlp {
 public:
  // sets: saved activation sets (one per layer, or one with checkpointing).
  // Two-byte activation_dtype (ModelOptions): the routed sets stay fp32; the GEMMs round as matmul_dtype.
  static StatusOr<std::unique_ptr<MoeMlp>> Create(const LlamaConfig& config, Backend* backend, int64_t max_rows,
                                                  int sets, DType matmul_dtype, DType activation_dtype);
  ~MoeMlp();

  // out[n, d] += MoE(xn[n, d]) with the sparse block's weights w; keeps the
  // routing and the experts' activations in `set`. real: per row 1 for a real
  // token, 0 for padding (host memory; null: every row is real), for the
  // aux-loss counts of `layer`.
  // lora: adapters on the experts (null: none).
  Status Forward(const UnitWeights& w, int set, int layer, const float* xn, int64_t n, const uint8_t* real,
                 float* out, const MoeLora* lora = nullptr);
  // dxn[n, d] (overwritten) from dout[n, d]; the router's and the experts'
  // weight gradients are added into the block's fp32 gradient buffer dw at
  // the spec's offsets (null: frozen, none computed).
  Status Backward(const UnitWeights& w, float* dw, int set, int layer, const float* xn, const float* dout, int64_t n,
                  float* dxn, const MoeLora* lora = nullptr);

  // Starts a micro-batch's aux-loss counts (call before the first Forward);
  // StopCounting: later Forwards (activation-checkpointing recomputes) count nothing.
  void ResetAux();
  void StopCounting() { counting_ = false; }
  // After the forward of every sparse layer: the load-balancing loss of the
  // micro-batch (transformers' value, before the coefficient); Backward then
  // adds `scale` * its gradient (scale = coefficient * the trainer's grad
  // scale; 0 = none).
  double AuxLoss() const;
  void SetAuxGradScale(float scale) { aux_scale_ = scale; }
  // The router z-loss (ST-MoE): the mean over the same rows as AuxLoss (every
  // sparse layer's real tokens together) of logsumexp(router logits)^2.
  // Counted while SetZLossGradScale's scale is nonzero; Backward then adds
  // scale * its gradient to the router logits (scale = coefficient * the
  // trainer's grad scale).
  double ZLoss() const;
  void SetZLossGradScale(float scale) { z_scale_ = scale; }

  // Context parallelism: a micro-batch's rows are split over a group of
  // ranks, but the aux loss is a product of means over all its real tokens
  // and the z-loss a mean over them. StatsSum sums `n` doubles in place over
  // that group (unset: this rank holds the whole micro-batch). SumOverGroup,
  // after the forward of every sparse layer and before the first Backward,
  // sums the counts, router-probability sums, real-token counts and z sums
  // of every layer, so AuxLoss, ZLoss and their gradients are the whole
  // micro-batch's on every member (each member's Backward covers its rows).
  // Once per counted forward: a no-op after StopCounting or without a sum.
  using StatsSum = std::function<Status(double* values, int64_t n)>;
  void SetStatsSum(StatsSum sum) { stats_sum_ = std::move(sum); }
  Status SumOverGroup();

  // What the step's metrics show (StepMetrics' moe_* figures): since
  // ResetStepStats, the sum of every counted micro-batch's AuxLoss, how many
  // there were, and the assignments (token x k slots over real tokens) per
  // layer and expert, layer-major (num_layers x num_experts; a dense layer's
  // row stays 0). This rank's alone: the trainer sums them over ranks.
  struct StepStats {
    double aux_sum = 0;
    int64_t micro_batches = 0;
    std::vector<double> load;
  };
  void ResetStepStats();
  StepStats step_stats() const;
  float aux_grad_scale() const { return aux_scale_; }
  // Assignments per expert of each layer counted since ResetAux (real tokens;
  // all zeros for a dense layer): the load behind the aux loss.
  const std::vector<std::vector<double>>& expert_counts() const { return aux_count_; }

 private:
  MoeMlp(const LlamaConfig& config, Backend* backend, DType md);
  struct Saved;  // one set's routing and expert activations
  MoeRouting Routing(Saved& s, int64_t n) const;
  // The experts' GEMMs over their row blocks: y = x W^T per expert.
  void ExpertsForward(const UnitWeights& w, const Saved& s, const float* xp, int layer, const MoeLora* lora);
  void ExpertsBackward(const UnitWeights& w, float* dw, const Saved& s, const float* xp, int layer,
                       const MoeLora* lora);
  // Expert e's adapter on `target` as a LoraCall (false: none); e = -1: the
  // layer's moe_tensors adapter (the router, or the shared expert's when shared).
  bool LoraCallFor(const MoeLora* lora, int layer, int e, LoraTarget target, LoraCall* c, bool shared = false) const;
  Status Count(const MoeRouting& r, int layer, int64_t n, const uint8_t* real);
  // qwen2_moe's shared expert: out += g ⊙ SwiGLU(xn); the backward adds into dxn.
  Status SharedForward(const UnitWeights& w, Saved& s, const float* xn, float* out, int layer, const MoeLora* lora);
  Status SharedBackward(const UnitWeights& w, float* dw, const Saved& s, const float* xn, const float* dout,
                        float* dxn, int layer, const MoeLora* lora);
  // aux_scale_ * d(aux)/d(probs) of `layer`'s n rows (zero on padding).
  std::vector<float> AuxProbGrad(int64_t n) const;
  // The z-loss's statistics of `layer` from logits_ (real rows), and its
  // gradient added into the router logits' gradient (dlogits, device).
  void CountZ(int layer, int64_t n, const uint8_t* real);
  void AddZGrad(const Saved& s, int layer, int64_t n, float* dlogits);
  double AuxRows() const;

  LlamaConfig config_;
  Backend* backend_;
  DType md_;
  std::vector<std::unique_ptr<Saved>> saved_;
  DeviceBuffer logits_, xp_, dy_, dh_, dgu_, dxp_, dweight_, dprobs_, weight_lp_;
  // The shared expert's scratch (qwen2_moe; empty otherwise): the identity
  // permutation (int32), dy, dh, dgu, and the gate's logit and gradient.
  DeviceBuffer ident_, dsy_, dsh_, dsgu_, sgate_grad_;
  std::vector<float> host_gate_;
  // Aux loss: per layer, assignments per expert and Σ probs per expert over real tokens.
  std::vector<std::vector<double>> aux_count_, aux_prob_;
  std::vector<double> aux_real_;  // real tokens per layer
  std::vector<float> host_probs_;
  std::vector<int32_t> host_expert_;
  std::vector<uint8_t> real_;  // the micro-batch's real-row mask (empty: all real)
  float aux_scale_ = 0;
  float z_scale_ = 0;
  std::vector<std::vector<float>> z_lse_;  // per layer: logsumexp of each row's router logits (0 on padding)
  std::vector<double> z_sum_;              // per layer: Σ lse^2 over real rows
  std::vector<float> host_logits_;
  bool counting_ = true;
  StatsSum stats_sum_;
  StepStats step_;  // the micro-batches before the current one (load: all of them)
};

}  // namespace shard
