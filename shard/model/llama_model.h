// The Llama decoder's forward and hand-written backward on a Backend, one FSDP
// unit at a time through UnitAccess. Knows shapes, not ranks.
//
// Activations for one micro-batch of up to max_rows = batch * seq tokens are
// allocated once. With activation checkpointing only each block's input is
// kept; the block's forward is recomputed in its backward, which gives
// identical gradients with less memory.
//
// Thread-safety: one thread at a time (it owns scratch buffers).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "shard/backend/backend.h"
#include "shard/model/block_attention.h"
#include "shard/model/moe_mlp.h"
#include "shard/model/lora_linear.h"
#include "shard/model/unit_weights.h"
#include "shard/spec/llama_config.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/unit_access.h"

namespace shard {

struct ModelOptions {
  int64_t max_batch = 1;  // sequences per micro-batch
  int64_t max_seq = 1;    // tokens per sequence
  // RoPE positions run below this (0 = max_seq). Context parallelism holds
  // seq_len / C rows of each sequence at their global positions: seq_len.
  int64_t max_position = 0;
  bool activation_checkpointing = false;
  // Rows whose fp32 logits the head and loss hold at once (ForwardBackward,
  // ForwardLoss): the logits buffer is loss_chunk_rows x vocab instead of
  // rows x vocab. 0 = auto: every row when their logits fit
  // kAutoLogitsBudgetBytes, else the most rows that do (at least 1).
  int64_t loss_chunk_rows = 0;
  // The inputs of every GEMM and of attention are rounded to this type
  // (GemmArgs::compute, AttentionShape::compute): tensor cores on GPUs, fp32
  // accumulation, fp32 activations in memory. train.precision bf16/fp16 sets
  // it to that type; kF32 keeps fp32 products (TF32 where the backend allows).
  DType matmul_dtype = DType::kF32;
  // kBF16/kF16 (train.precision bf16/fp16): the activations kept between
  // forward and backward — every block input (the activation-checkpoint
  // boundaries) and each layer's saved tensors — are held in this type,
  // rounded to nearest even where they are produced, and every later reader
  // (the rest of the forward, the backward, a checkpointing recompute) reads
  // the rounded value; one layer's fp32 working set does the math. The
  // normalisation statistics (rstd, log-sum-exp), the final norm, the logits
  // and the backward scratch stay fp32. Only Cast ops round, so the CPU and
  // CUDA backends hold bit-identical activations. kF32: fp32 throughout.
  DType activation_dtype = DType::kF32;
  // A block's weight gradients go to a two-byte buffer when the UnitAccess
  // hands one out (GradBufferStoreOnce: FSDP under a two-byte reduce_dtype):
  // computed in fp32 this many elements of output rows at a time, then stored
  // rounded. 0 = kWeightGradChunkElems.
  int64_t weight_grad_chunk_elems = 0;
};

// 16M floats (64 MiB) of fp32 weight-gradient chunk, whatever the model size.
constexpr int64_t kWeightGradChunkElems = int64_t{1} << 24;

// The chunk size LlamaModel uses for these options (shard/spec/llama_config.h).
int64_t ResolveLossChunkRows(const LlamaConfig& config, const ModelOptions& options);

// One micro-batch in backend memory. rows = batch * seq; int32 arrays of `rows`.
struct DeviceBatch {
  int64_t batch = 0;
  int64_t seq = 0;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;      // < 0: no loss at this position
  const int32_t* positions = nullptr;    // RoPE positions (restart per packed sample)
  // null: plain causal; else no attention across segments. Read only by the
  // block attention (LlamaModel::SetAttention): the fused one takes the rows'
  // ids, CpAttention the whole sequences' ([batch * seq * C]).
  const int32_t* segment_ids = nullptr;
  // Host memory, per row: 1 a real token, 0 padding (MoE aux loss, as
  // transformers' attention mask); null: every row is real.
  const uint8_t* real_rows = nullptr;
  int64_t rows() const { return batch * seq; }
};

// Rows [begin, end) of a micro-batch (row = sequence * seq + position) whose
// target log-probs are summed together: one reply of a preference pair.
struct RowSpan {
  int64_t begin = 0;
  int64_t end = 0;
};

// ForwardBackwardSpans' loss: the spans, and a function that, given each
// span's summed cross-entropy (−Σ log p over its targets, in span order),
// returns the factor each span's cross-entropy sum is differentiated with
// (rows outside every span get 0).
struct SpanLoss {
  std::vector<RowSpan> spans;
  std::function<StatusOr<std::vector<float>>(const std::vector<double>& span_nll)> scales;
};

class QkvExtras;

struct WeightGrads;

class LlamaModel {
 public:
  static StatusOr<std::unique_ptr<LlamaModel>> Create(const LlamaConfig& config, Backend* backend,
                                                      const ModelOptions& options);
  ~LlamaModel();

  const LlamaConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Forward and backward of one micro-batch. Adds grad_scale * d(loss_sum)/dθ
  // into the units' gradient buffers and returns loss_sum (the sum of the
  // per-target-token cross-entropies, unscaled). The trainer passes
  // grad_scale = 1 / (target tokens in the whole global batch).
  StatusOr<double> ForwardBackward(const DeviceBatch& batch, UnitAccess& access, float grad_scale);

  // Forward and backward of one micro-batch under a loss of per-span sums
  // (preference objectives, shard/train/preference_objective.h): the forward
  // gives each span's summed cross-entropy, loss.scales turns them into
  // factors w_s, and the backward adds Σ_s w_s · d(span s's CE sum)/dθ — each
  // target token's d/dlogits is its span's factor times the cross-entropy
  // gradient. Returns the CE sum over all target rows. One trunk forward, as
  // ForwardBackward; the head's logits are computed twice when they span
  // more than one loss chunk. Spans must lie inside the micro-batch.
  StatusOr<double> ForwardBackwardSpans(const DeviceBatch& batch, UnitAccess& access, const SpanLoss& loss);
  // Forward only: each span's summed cross-entropy (the reference pass).
  StatusOr<std::vector<double>> ForwardSpanLosses(const DeviceBatch& batch, UnitAccess& access,
                                                  const std::vector<RowSpan>& spans);

  // Forward only: sum of target-token losses.
  StatusOr<double> ForwardLoss(const DeviceBatch& batch, UnitAccess& access);

  // Forward only: logits [rows.size(), vocab] of the listed batch rows (row =
  // sequence * seq + position), in that order, in backend memory, valid until
  // the next call. Callers (greedy generation, SFT exact-match eval) need one
  // row per sequence, so this never holds the whole [batch*seq, vocab] tensor;
  // at most max_logits_rows() rows per call.
  StatusOr<const float*> ForwardLogits(const DeviceBatch& batch, UnitAccess& access,
                                       const std::vector<int64_t>& rows);

  // Binds LoRA adapters (shard/model/lora_linear.h) to the block linears they
  // target, freezing the base: ForwardBackward then adds gradients only into
  // lora->grads, computes no weight GEMM for base linears and asks `access`
  // for no gradient buffer. Null unbinds. The binding must outlive its use.
  Status SetLora(const LoraBinding* lora);
  const LoraBinding* lora() const { return lora_; }

  // MoE models (shard/model/moe_mlp.h): ForwardBackward also adds
  // scale * d(aux)/dθ of the micro-batch's load-balancing loss (transformers'
  // load_balancing_loss_func, before its coefficient); 0 (the default) adds
  // none. moe_aux_loss(): that loss of the last ForwardBackward (0 for a
  // dense model).
  void SetMoeAuxGradScale(float scale);
  double moe_aux_loss() const;
  // The router z-loss (MoeMlp::ZLoss), the same way: scale * its gradient; counted while scale != 0.
  void SetMoeZLossGradScale(float scale);
  double moe_z_loss() const;
  // Context parallelism: sums the aux/z-loss statistics over the ranks that
  // split each micro-batch (MoeMlp::SetStatsSum; called at the start of the
  // blocks' backward). Null: this rank holds whole micro-batches.
  void SetMoeStatsSum(MoeMlp::StatsSum sum);
  // The step's routing statistics (MoeMlp::StepStats; empty for a dense model).
  void ResetMoeStepStats();
  MoeMlp::StepStats moe_step_stats() const;
  // MoeMlp::expert_counts of the last forward (empty for a dense model).
  std::vector<std::vector<double>> moe_expert_counts() const;

  // The attention every block calls (block_attention.h); null restores the
  // backend's fused attention. Context parallelism gives a CpAttention. The
  // object must outlive its use.
  void SetAttention(BlockAttention* attention) { attention_ = attention ? attention : &fused_; }

  int64_t loss_chunk_rows() const { return chunk_rows_; }
  // Rows the logits buffer holds: max(loss_chunk_rows, max_batch).
  int64_t max_logits_rows() const { return logits_rows_; }

 private:
  struct LayerActs;  // one block's saved activations
  LlamaModel(const LlamaConfig& config, Backend* backend, const ModelOptions& options);
  Status Allocate();
  Status CheckBatch(const DeviceBatch& b) const;

  struct LowpActs;   // one block's saved activations in the two-byte activation_dtype
  bool lowp_acts() const { return options_.activation_dtype != DType::kF32; }

  // x: block input [rows, d]; fills acts (qkv, attention, norms, mlp) and writes
  // the block output to `out`. Two-byte activations: each saved tensor is
  // rounded in place as it is produced, its two-byte copy kept in `keep` (null:
  // a scratch — evaluation, or a checkpointing pass that keeps nothing).
  Status BlockForward(int layer, const UnitWeights& w, const DeviceBatch& b, const float* x, LayerActs& a, float* out,
                      LowpActs* keep = nullptr);
  // The block's weights as handed out: a MoE model's sparse blocks have their own layout.
  UnitWeights& WeightsFor(int layer) { return config_.sparse_layer(layer) ? moe_w_ : block_w_; }
  // Rounds n fp32 values at x to activation_dtype in place, leaving the two-byte
  // values at `lp` (null: round_scratch()). A no-op for fp32 activations.
  void Round(float* x, int64_t n, DeviceBuffer* lp);
  void* round_scratch() const { return scratch_gu_.data(); }  // free during any forward
  // Widens layer l's kept two-byte set (and statistics) into the working set.
  void Restore(const LowpActs& keep, LayerActs& a, int64_t rows);
  // Block l's input (l = L: the final hidden state) in fp32 for `rows` rows:
  // resid_[l] itself, or (two-byte) widened into x_work_.
  float* BlockInput(int l, int64_t rows);
  // Stores the fp32 block output `out` as residual l, rounded, when two-byte;
  // with fp32 activations the block wrote resid_[l] itself.
  void StoreResidual(int l, const float* out, int64_t rows);
  // dy: grad of block output; writes grad of block input into dx (may alias dy).
  // dw frozen: the base is frozen (no weight gradients at all).
  Status BlockBackward(int layer, const UnitWeights& w, const WeightGrads& dw, const DeviceBatch& b, const float* x,
                       LayerActs& a, const float* dy, float* dx);
  // Allocates wgrad_scratch_ on the first two-byte gradient buffer.
  Status EnsureWeightGradScratch();
  // The adapter of (layer, target), if bound: y += its product / dx += its input gradient.
  void LoraAdd(int layer, LoraTarget target, const float* x, int64_t n, float* y);
  void LoraGrad(int layer, LoraTarget target, const float* x, const float* dy, int64_t n, float* dx);
  bool LoraCallFor(int layer, LoraTarget target, LoraCall* call) const;
  bool MoeLoraFor(int layer, MoeLora* m);  // the experts' adapters of a sparse layer (false: none)
  // Runs embedding + blocks; leaves the final hidden state in resid_[L].
  Status ForwardTrunk(const DeviceBatch& b, UnitAccess& access, bool keep_for_backward);
  // Binds `weights` to a unit the access handed out (its ParamsDType), after
  // checking the GEMMs can take that type with matmul_dtype.
  Status Bind(UnitWeights* weights, int unit, const float* w, const UnitAccess& access);
  // Final norm of every row into final_norm_; acquires the head unit (and the
  // embedding unit when tied) and returns W_head [vocab, d]. The caller releases.
  StatusOr<WeightRef> HeadForward(const DeviceBatch& b, UnitAccess& access);
  Status ReleaseHead(UnitAccess& access);  // undoes HeadForward's acquisitions
  // After ForwardTrunk(keep): the head, the loss (grad_scale on every target,
  // or span factors) and the whole backward.
  StatusOr<double> HeadAndBackward(const DeviceBatch& b, UnitAccess& access, float grad_scale, const SpanLoss* spans);
  // Its parts: the head and loss chunk by chunk (row_scale: the span factors
  // per row, else grad_scale on every target; have_logits: a single chunk's
  // logits are already in logits_) and the final norm's backward into
  // grad_a_; then the blocks' backward.
  StatusOr<double> HeadBackward(const DeviceBatch& b, UnitAccess& access, const WeightRef& w_head, float grad_scale,
                                const std::vector<float>* row_scale, bool have_logits);
  Status BlocksBackward(const DeviceBatch& b, UnitAccess& access);
  // The spans' CE sums (chunk by chunk, logits kept), passed through
  // spans.scales, spread to one factor per row.
  StatusOr<std::vector<float>> SpanRowScales(const DeviceBatch& b, const WeightRef& w_head, const SpanLoss& spans);

  LlamaConfig config_;
  ParamLayout layout_;
  Backend* backend_;
  ModelOptions options_;
  int64_t max_rows_ = 0;
  int64_t chunk_rows_ = 0;   // rows per head/loss chunk
  int64_t logits_rows_ = 0;  // rows of logits_

  // L+1 block inputs/outputs [rows, d]: fp32, or activation_dtype (two bytes
  // each behind the float*) when the activations are two-byte.
  std::vector<DeviceBuffer> resid_;
  DeviceBuffer x_work_;  // two-byte activations: the fp32 block input in use
  // fp32 sets: L, or 1 with checkpointing or two-byte activations (the working set).
  std::vector<std::unique_ptr<LayerActs>> acts_;
  std::vector<std::unique_ptr<LowpActs>> lowp_;  // two-byte activations without checkpointing: L sets
  DeviceBuffer final_norm_, final_rstd_, logits_;
  DeviceBuffer grad_a_, grad_b_, scratch_d_, scratch_ffn_, scratch_attn_, scratch_qkv_, scratch_gu_;
  DeviceBuffer rope_table_;
  std::unique_ptr<QkvExtras> extras_;  // qwen2 biases / qwen3 q,k norms (no-op otherwise)
  std::unique_ptr<MoeMlp> moe_;        // the sparse blocks' experts (MoE families)
  UnitWeights moe_w_;                  // a sparse block in use
  UnitWeights embed_w_, block_w_, head_w_;  // the unit in use of each kind, as handed out

  FusedAttention fused_;
  BlockAttention* attention_ = &fused_;
  const LoraBinding* lora_ = nullptr;
  LoraScratch lora_scratch_;
  std::vector<DeviceBuffer> lora_t_;  // saved t per (layer, adapter); one layer's set with checkpointing
  DeviceBuffer wgrad_scratch_;  // fp32 chunk of a weight gradient bound for a two-byte buffer
  DeviceBuffer frozen_norm_dw_;  // where a frozen base's norm-weight gradients go (never read)
  bool training_ = false;        // in ForwardBackward: adapter dropout applies
};

}  // namespace shard
