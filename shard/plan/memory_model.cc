#include "shard/plan/memory_model.h"
#include "shard/plan/memory_tier_cost.h"

#include <algorithm>
#include <cstdio>

#include "shard/plan/adapter_memory.h"
#include "shard/plan/gather_sim.h"
#include "shard/plan/cp_cost.h"
#include "shard/plan/moe_model.h"
#include "shard/spec/shard_layout.h"
#include "shard/spec/param_layout.h"
#include "shard/common/format_number.h"

namespace shard::plan {
namespace {

std::string Num(int64_t n) {
  // 1234567 -> "1,234,567"
  std::string s = std::to_string(n), out;
  int k = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (k && k % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++k;
  }
  return std::string(out.rbegin(), out.rend());
}

std::string Fmt2(double v) { return FormatNumber("%.3f", v); }

struct Items {
  std::vector<MemoryItem>* list;
  void Add(const std::string& what, int64_t bytes, const std::string& how) {
    if (bytes > 0) list->push_back({what, bytes, how});
  }
};

// parallel.context_parallel: CpAttention's buffers, one layer's K/V at the whole sequence (cp_cost.h).
void AddCpExchange(const Workload& w, Items& dev) {
  dev.Add("context-parallel attention buffers (fp32)", CpExchangeBytes(w),
          "3 x one layer's K/V at " + std::to_string(w.seq_len) + " tokens, 2 at " +
              std::to_string(w.local_seq_len()) + ", 4 chunks of queries" +
              (!w.cpu_engine && w.compute != DType::kF32 ? ", rounded copies" : ""));
}

int64_t Sum(const std::vector<MemoryItem>& items) {
  int64_t s = 0;
  for (const auto& i : items) s += i.bytes;
  return s;
}

// Rows of fp32 logits the engine's LlamaModel holds: one loss chunk
// (train.loss_chunk_rows, auto keeps it under 256 MiB), at least one row per
// sequence for ForwardLogits.
int64_t EngineLogitsRows(const Workload& w) {
  const int64_t batch = std::max<int64_t>(1, w.micro_batch);
  const int64_t rows = batch * std::max<int64_t>(1, w.local_seq_len());
  return std::max(ResolveLossChunkRows(w.model, rows, std::max<int64_t>(0, w.loss_chunk_rows)), batch);
}

}  // namespace

namespace {

// What every part of the estimate shares: the job's shapes and the shard
// layout its strategy implies.
struct EstimateContext {
  const Workload& w;
  const LlamaConfig& c;
  std::vector<int64_t> numels;
  int S = 1;               // ranks a unit is split across
  int64_t shard = 0;       // elements of this rank's shard of every unit
  int64_t rows = 0;        // tokens per micro-batch
  int64_t logit_rows = 0;  // rows of fp32 logits held at once
  std::string logits_how, shard_how;
  ActivationElems a;
  bool keep_forward = false;  // shard_grad_op keeps forward gathers for backward
};

EstimateContext MakeContext(const Workload& w) {
  EstimateContext x{w, w.model, {}, 1, 0, 0, 0, {}, {}, {}, false};
  x.numels = UnitNumels(x.c);
  auto shape = GroupShapeFor(w.strategy, std::max(1, w.world), w.shard_group_size);
  x.S = shape.ok() ? shape->shard_size : std::max(1, w.world);
  x.shard = ShardNumel(x.numels, x.S);
  x.rows = w.micro_batch * w.local_seq_len();  // context parallelism: this rank's chunks
  x.logit_rows = EngineLogitsRows(w);
  x.logits_how = Num(x.logit_rows) + " x " + Num(x.c.vocab_size) + " x 4 B" +
                 (x.logit_rows < x.rows ? " (loss in chunks of the " + Num(x.rows) + " rows)" : "");
  x.a = Activations(x.c, w.micro_batch, w.local_seq_len(), w.activation_checkpointing);
  x.keep_forward = w.strategy == ShardStrategy::kShardGradOp;
  x.shard_how = Num(x.shard) + " elements (" + std::to_string(x.numels.size()) + " units padded and split " +
                std::to_string(x.S) + " ways)";
  return x;
}

// The Gloo communicator's ring scratch (comm::RingReduceScatter, also the
// first half of its all-reduce): two blocks of the largest call, grow-only
// and kept by each communicator for the life of the process. Full fine-tuning
// reduce-scatters each unit's gradient over the shard group (blocks of a unit
// shard, in parallel.reduce_dtype) and all-reduces the shards across replicas
// (fp32); LoRA all-reduces its adapters' gradients (fp32) over both.
int64_t GlooRingScratchBytes(const EstimateContext& x) {
  const Workload& w = x.w;
  const int S = x.S, R = std::max(1, w.world) / std::max(1, S);
  int64_t rs = 0, ar_shard = 0, ar_replica = 0;
  if (w.method != Method::kFull) {
    const int64_t lora = LoraParams(x.c, w.lora_rank, w.lora_targets);
    if (S > 1) ar_shard = (lora + S - 1) / S;
    if (R > 1) ar_replica = (lora + R - 1) / R;
    return 2 * (ar_shard + ar_replica) * 4;
  }
  for (int64_t n : x.numels) {
    const int64_t shard = Layout(n, S).shard_numel;
    if (S > 1) rs = std::max(rs, shard);
    if (R > 1) ar_replica = std::max(ar_replica, (shard + R - 1) / R);
  }
  return 2 * rs * static_cast<int64_t>(DTypeSize(w.reduce)) + 2 * ar_replica * 4;
}

// The CPU engine's state (everything fp32, exactly the engine's buffers for
// one rank, but the gathered units under bf16/fp16: two bytes, as wire and
// compute copy, FsdpOptions::two_byte_compute_copy): the shards, the
// gathered units and LoRA's adapters.
void AddCpuState(const EstimateContext& x, Items& dev) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  const int S = x.S;
  const int64_t shard = x.shard, rows = x.rows;
  const std::string& shard_how = x.shard_how;
  const std::vector<int64_t>& numels = x.numels;
  // LoRA: the base frozen (no gradient, no moments), adapters whole on every rank.
  const bool peft = w.method != Method::kFull;
  if (peft) {
    dev.Add("frozen base shard (fp32; no grads, no AdamW)", shard * 4, shard_how + " x 4 B");
  } else if (!w.offload.optimizer) {
    dev.Add("parameter shard (fp32)", shard * 4, shard_how + " x 4 B");
    dev.Add("gradient shard (fp32)", shard * 4, shard_how + " x 4 B");
    dev.Add("AdamW moments (fp32 m, v)", shard * 8, shard_how + " x 8 B");
  } else {
    // parallel.offload_optimizer on the CPU backend (OptimizerState): the
    // shard the all-gathers read (two bytes under bf16/fp16), the master, m,
    // v in optim.state_dtype and the fp32 gradient shard, plus the runtime's
    // two gradient stages and the master's staging shards.
    const int64_t cb = w.compute_bytes();
    int64_t max_shard = 0;
    for (int64_t n : numels) max_shard = std::max(max_shard, Layout(n, S).shard_numel);
    const std::string sname = DTypeName(w.optimizer_state);
    dev.Add("parameter shard (" + std::string(DTypeName(w.compute)) + ")", shard * cb,
            shard_how + " x " + std::to_string(cb) + " B");
    dev.Add("offloaded optimizer (" + sname + " master, m, v; fp32 gradients)", shard * w.offloaded_state_bytes(),
            shard_how + " x " + std::to_string(w.offloaded_state_bytes()) + " B");
    const bool wide = w.optimizer_state == DType::kBF16 && w.compute != DType::kBF16;
    const bool narrow = w.compute != DType::kF32 && !(w.optimizer_state == DType::kBF16 && w.compute == DType::kBF16);
    const int64_t stages = 2 * max_shard * (4 + (wide ? 4 : 0) + (narrow ? 2 : 0));
    dev.Add("offload staging", stages, "2 x largest unit shard (gradient stages, master casts)");
  }
  if (S > 1) {
    GatherPeak g = SimulateGathers(ElementWeights(numels, S, !peft), c.num_layers, c.tie_word_embeddings,
                                   w.prefetch, x.keep_forward);
    const int64_t cb = w.compute_bytes();
    dev.Add(cb == 4 ? "gathered parameters" : "gathered parameters (" + std::string(DTypeName(w.compute)) + ")",
            g.params * cb, Num(g.params) + " elements held at the worst moment x " + std::to_string(cb) + " B");
    dev.Add("unsharded gradients + landing shards", g.grads * 4, Num(g.grads) + " elements x 4 B");
  }
  if (peft) {
    const int64_t lora = LoraParams(c, w.lora_rank, w.lora_targets);
    dev.Add("LoRA adapters (fp32 weights, grads, AdamW m, v)", lora * 16, Num(lora) + " adapter parameters x 16 B");
    const LoraActivationElems la =
        LoraActivations(c, w.lora_rank, w.lora_targets, rows, w.activation_checkpointing, w.lora_dropout > 0);
    dev.Add("LoRA path buffers", la.total() * 4, "saved x·Aᵀ per adapter, t, g (and the dropout buffers) x 4 B");
  }
}

// The CPU engine's working set for one micro-batch: activations (two bytes
// kept under bf16/fp16, ActivationBytes), logits, scratch, GEMM roundings.
void AddCpuWorkingSet(const EstimateContext& x, Items& dev) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  const int64_t rows = x.rows, logit_rows = x.logit_rows;
  const ActivationElems& a = x.a;
  const int64_t sets = w.activation_checkpointing ? 1 : c.num_layers;
  const std::string act = w.compute == DType::kF32 ? "" : std::string(" (") + DTypeName(w.compute) + ", fp32 working set)";
  dev.Add("activations" + act, ActivationBytes(c, w.micro_batch, w.local_seq_len(), w.activation_checkpointing, w.compute),
          std::to_string(c.num_layers + 1) + " residuals + " + std::to_string(sets) + " saved layer set" +
              (sets > 1 ? "s" : "") + " for " + Num(rows) + " tokens x " +
              std::to_string(DTypeSize(w.compute)) + " B");
  dev.Add("logits (fp32, becomes its gradient)", logit_rows * c.vocab_size * 4, x.logits_how);
  dev.Add("backward scratch", a.scratch * 4, Num(rows) + " tokens x (3d + 3ffn + heads + qkv) x 4 B");
  dev.Add("batch staging + RoPE table", (6 * rows + a.rope) * 4, "tokens/targets/positions twice + cos/sin");
  AddCpExchange(w, dev);
  if (w.compute != DType::kF32) {
    // The CPU backend's two-byte GEMMs round A and B into two grow-only fp32
    // copies (cpu_gemm.cc): A at most the gate/up gradient or a loss chunk's
    // logit gradient, B at most the head, the gate/up weight or an activation.
    const int64_t d = c.hidden_size, f = c.intermediate_size;
    const int64_t a_max = std::max(rows * 2 * f, logit_rows * c.vocab_size);
    const int64_t b_max = std::max({c.vocab_size * d, 2 * f * d, rows * f});
    dev.Add("GEMM operands rounded (fp32 copies)", (a_max + b_max) * 4,
            "largest A and B operands of any GEMM x 4 B (grow-only scratch)");
  }
}

// What a CPU rank holds whatever the job: kernel scratch, Gloo's ring
// buffers, the process's libraries. Returns their sum.
int64_t AddCpuFixed(const EstimateContext& x, const ClusterSpec& cluster, int ranks_per_node, Items& dev) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  // Attention tiles per pool thread (grow-only, kept for the process).
  const int64_t seq_pad = (w.seq_len + 15) / 16 * 16, hd_pad = (c.head_dim() + 7) / 8 * 8;
  const int64_t threads = std::max(1, cluster.host.cpu_cores / ranks_per_node) + 1;
  const int64_t scratch = threads * (7 * seq_pad * hd_pad + 2 * c.head_dim() * seq_pad + seq_pad + 60 * seq_pad +
                                     30 * hd_pad) * 4;
  dev.Add("kernel scratch (per thread, persistent)", scratch, std::to_string(threads) + " threads x attention tiles");
  if (const int64_t ring = GlooRingScratchBytes(x); ring > 0)
    dev.Add("Gloo ring scratch (kept)", ring, "2 blocks of the largest reduce-scatter/all-reduce per communicator");
  dev.Add("process runtime (libraries, BLAS buffers)", kCpuProcessBytes, "fixed allowance");
  if (kCpuWorkerCudaLibBytes > 0)
    dev.Add("CUDA libraries the worker links (unused on CPU)", kCpuWorkerCudaLibBytes,
            "cuBLASLt's tables and code, NCCL, cudart: this build has the CUDA backend");
  return scratch + kCpuProcessBytes + kCpuWorkerCudaLibBytes;
}

// The CPU engine: exactly the engine's buffers per rank (fp32 but for the
// activations under bf16/fp16).
void EstimateCpu(const EstimateContext& x, const ClusterSpec& cluster, MemoryEstimate& est) {
  const Workload& w = x.w;
  const int64_t shard = x.shard;
  const std::string& shard_how = x.shard_how;
  Items dev{&est.device}, host{&est.host};
  est.ranks_per_node = std::max(1, w.world);
  AddCpuState(x, dev);
  AddCpuWorkingSet(x, dev);
  est.device_fixed = AddCpuFixed(x, cluster, est.ranks_per_node, dev);
  const bool peft = w.method != Method::kFull;
  // As Checkpointer::Save holds it: kept by async saves, freed after a
  // synchronous one, none when a synchronous save writes offloaded state in place.
  const int64_t snap = 3 * static_cast<int64_t>(DTypeSize(w.optimizer_state));  // p, m, v as held
  // A LoRA checkpoint holds only the adapters (already counted).
  if (!peft && w.async_checkpoint)
    dev.Add("async checkpoint snapshot (p, m, v as held)", shard * snap, shard_how + " x " + std::to_string(snap) + " B");
  else if (!peft && (w.checkpoint_keep_last > 0 || w.memory_tier_keep_last > 0) && !w.offload.optimizer)
    dev.Add("checkpoint snapshot while saving (fp32 p, m, v; freed after)", shard * 12, shard_how + " x 12 B");
  // model.from_hf: each rank reads its own byte ranges of the mapped files
  // into one unit-shard buffer (Trainer::InitRuntime), far below the
  // training peak, so loading adds nothing here.
  est.device_total = Sum(est.device);
  host.Add("ranks on this host", est.device_total * est.ranks_per_node,
           std::to_string(est.ranks_per_node) + " x " + FormatBytes(est.device_total));
  est.host_total = Sum(est.host);
}

// The GPU items of full fine-tuning: sharded state (on the device or
// offloaded) and the gathered units. Returns the gathered bytes; sets
// *host_state to the bytes per rank the offload keeps in host memory.
int64_t AddFullState(const EstimateContext& x, Items& dev, int64_t tb, int64_t* host_state) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  const int S = x.S;
  const int64_t shard = x.shard;
  const int64_t cb = w.compute_bytes(), sb = w.state_bytes();
  const std::string cname = DTypeName(w.compute), sname = w.fp32_master ? "fp32" : cname;
  const bool as_built = w.fp32_transients;  // full fine-tuning as built (Workload::fp32_transients)
  const std::string tname = as_built ? "fp32" : cname;
  const std::string& shard_how = x.shard_how;
  const bool keep_forward = x.keep_forward;
  const std::vector<int64_t>& numels = x.numels;
  int64_t gathered_bytes = 0;
  const bool gather = S > 1 || cb != sb || w.offload.optimizer || w.offload.params;
  if (!w.offload.optimizer && !w.offload.params) {
    dev.Add("parameter shard (" + sname + ")", shard * sb, shard_how + " x " + std::to_string(sb) + " B");
    dev.Add("gradient shard (" + sname + ")", shard * sb, shard_how + " x " + std::to_string(sb) + " B");
    dev.Add("AdamW moments (" + sname + " m, v)", shard * 2 * sb, shard_how + " x " + std::to_string(2 * sb) + " B");
  } else {
    if (!w.offload.params)
      dev.Add("parameter shard (" + cname + " copy to all-gather from)", shard * cb,
              shard_how + " x " + std::to_string(cb) + " B");
    *host_state = shard * (w.fp32_master ? w.offloaded_state_bytes() + (w.offload.params ? cb : 0) : 4 * sb);
  }
  if (gather) {
    // A held unit's compute copy is its gathered values in the compute type
    // (FsdpOptions::two_byte_compute_copy), and a prefetched one waits in
    // that type: cb bytes per element, whatever the transients' width.
    UnitBytes b = ElementWeights(numels, S, true);
    for (int64_t& e : b.gathered) e *= cb;
    for (auto* v : {&b.grad, &b.grad_shard, &b.grad_in_flight})
      for (int64_t& e : *v) e *= tb;
    const bool store_once = as_built && S > 1 && w.reduce != DType::kF32 && !c.qkv_bias() && !c.qk_norm();
    std::string grad_what = "unsharded gradients + landing shards (" + tname + ")";
    if (as_built && S > 1 && w.reduce != DType::kF32) {
      // A two-byte reduce_dtype: a unit being reduce-scattered is its
      // reduce_dtype buffer (no fp32 landing shard); blocks are computed
      // straight into that buffer (FsdpRuntime::GradBufferStoreOnce).
      const int64_t rb = static_cast<int64_t>(DTypeSize(w.reduce));
      b.cast.assign(numels.size(), 0);
      for (size_t u = 0; u < numels.size(); ++u) {
        const int64_t padded = Layout(numels[u], S).padded;
        b.grad_in_flight[u] = padded * rb;
        const bool block = u > 0 && u + 1 < numels.size();
        if (store_once && block) {
          b.grad[u] = padded * rb, b.grad_shard[u] = 0;
        } else {
          b.cast[u] = padded * rb;  // the two-byte copy exists beside the fp32 gradient for a moment
        }
      }
      const std::string rn = DTypeName(w.reduce);
      grad_what = store_once ? "unsharded gradients (" + rn + " blocks, fp32 embedding/head until cast; " + rn + " wire)"
                             : "unsharded gradients (fp32 until cast to " + rn + " for the wire)";
    }
    GatherPeak g = SimulateGathers(b, c.num_layers, c.tie_word_embeddings, w.prefetch, keep_forward);
    dev.Add("gathered parameters (" + cname + (cb != sb ? " wire and compute copy" : "") + ")", g.params,
            Num(g.params / cb) + " elements at the worst moment (unit in use + " + std::to_string(w.prefetch) +
                " prefetched" + (keep_forward ? ", all forward gathers kept" : "") + ")");
    const bool lowp_reduce = as_built && S > 1 && w.reduce != DType::kF32;
    dev.Add(grad_what, g.grads,
            (lowp_reduce ? std::string() : Num(g.grads / tb) + " elements ") +
                "(unit in backward + one being reduce-scattered)");
    gathered_bytes = g.total;
    if (store_once) {
      // The fp32 chunk a block's weight gradient is computed through
      // (LlamaModel::EnsureWeightGradScratch; kWeightGradChunkElems = 2^24).
      const int64_t d = c.hidden_size, f = c.intermediate_size, hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
      int64_t chunk = d;
      for (auto [in, out] : {std::pair<int64_t, int64_t>{d, c.qkv_dim()}, {hq, d}, {d, 2 * f}, {f, d}}) {
        const int64_t rows = std::max<int64_t>(8, (int64_t{1} << 24) / in / 8 * 8);
        chunk = std::max(chunk, std::min(rows, out) * in);
      }
      dev.Add("weight-gradient chunk (fp32)", chunk * 4, "one chunk of output rows, at most 16M floats");
      gathered_bytes += chunk * 4;
    }
  }
  return gathered_bytes;
}

// LoRA / QLoRA: the frozen base sharded like parameters but with no
// gradient and no optimizer state (FsdpOptions::frozen), held in
// base_dtype() (fp32 as built; QLoRA: its block linears in NF4), and the
// adapters every rank holds whole with their gradients and AdamW moments
// (LoraAdapters), plus the model's LoRA buffers (LlamaModel::SetLora).
// `tb`: bytes per transient element. Returns the transient bytes.
int64_t AddAdapterState(const EstimateContext& x, Items& dev, int64_t tb) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  const int S = x.S;
  const int64_t bb = DTypeSize(w.base_dtype());
  const bool q = w.method == Method::kQlora;
  const double bits = q ? w.qlora_bits : 0;
  const std::string bname = DTypeName(w.base_dtype()), tname = tb == 4 ? "fp32" : DTypeName(w.compute);
  int64_t transient = 0;
  ParamLayout layout = ParamLayout::ForLlama(c);
  UnitBytes b;
  int64_t base_shard = 0, max_block = 0;
  for (const auto& u : layout.units) {
    ShardLayout l = Layout(u.numel, S);
    // Gathered: NF4 travels packed and is dequantised one unit at a time
    // (below); a 16/32-bit base is gathered like full fine-tuning's
    // parameters, its compute copy in the compute type.
    const int64_t cb = w.compute_bytes();
    b.gathered.push_back(q ? FrozenUnitBytes(u, l.padded, bits, cb) : l.padded * cb);
    b.grad.push_back(0);
    b.grad_shard.push_back(0);
    base_shard += FrozenUnitBytes(u, l.shard_numel, bits, bb);
    if (u.kind == UnitKind::kBlock) max_block = std::max(max_block, l.padded);
  }
  dev.Add(q ? "frozen base shard (NF4 block linears, " + bname + " rest; no grads, no AdamW)"
            : "frozen base shard (" + bname + "; no grads, no AdamW)",
          base_shard,
          x.shard_how + (q ? " (" + Fmt2(bits) + " bits per NF4 weight)" : " x " + std::to_string(bb) + " B"));
  // As FsdpRuntime gathers: across the shard group, or into a compute copy
  // when the held dtype is not the compute dtype (NF4 is dequantised below).
  if (S > 1 || (!q && w.base_dtype() != w.compute)) {
    GatherPeak g = SimulateGathers(b, c.num_layers, c.tie_word_embeddings, w.prefetch, x.keep_forward);
    dev.Add(q ? "gathered base units (NF4 packed)"
              : "gathered base units (" + std::string(DTypeName(w.compute)) + " wire and compute copy)",
            g.total,
            (q ? Num(g.params) + " bytes" : Num(g.params / w.compute_bytes()) + " elements x " +
                                                 std::to_string(w.compute_bytes()) + " B") + " (unit in use + " +
                std::to_string(w.prefetch) + " prefetched" + (x.keep_forward ? ", all forward gathers kept" : "") + ")");
    transient += g.total;
  }
  if (q) {  // decoded straight into the compute type (FsdpOptions::two_byte_compute_copy)
    const int64_t cb = w.compute_bytes();
    dev.Add("dequantised unit (" + std::string(DTypeName(w.compute)) + ")", max_block * cb,
            "one block's weights dequantised for its GEMMs");
    transient += max_block * cb;
  }
  const int64_t lora = LoraParams(c, w.lora_rank, w.lora_targets);
  dev.Add("LoRA adapters (fp32 weights, grads, AdamW m, v)", lora * 16,
          Num(lora) + " adapter parameters (rank " + std::to_string(w.lora_rank) + ", " +
              std::to_string(w.lora_targets.size()) + " targets) x 16 B, whole on every rank");
  const LoraActivationElems la =
      LoraActivations(c, w.lora_rank, w.lora_targets, x.rows, w.activation_checkpointing, w.lora_dropout > 0);
  dev.Add("LoRA path buffers (" + tname + ")", la.total() * tb,
          "saved x·Aᵀ per adapter, t and g [" + Num(x.rows) + " tokens x r]" +
              (w.lora_dropout > 0 ? ", dropout input + its gradient [tokens x widest input]" : ""));
  transient += la.total() * tb;
  return transient;
}

// Activations, logits, backward scratch, GEMM casts, the CUDA runtime and
// fragmentation over the transient bytes.
void AddGpuTransients(const EstimateContext& x, Items& dev, int64_t tb, int64_t gathered_bytes, int64_t* allowance) {
  const Workload& w = x.w;
  const LlamaConfig& c = x.c;
  const int64_t rows = x.rows, logit_rows = x.logit_rows;
  const ActivationElems& a = x.a;
  const int64_t cb = w.compute_bytes();
  const std::string cname = DTypeName(w.compute);
  const bool as_built = w.fp32_transients;
  const std::string tname = as_built ? "fp32" : cname;
  const std::string& logits_how = x.logits_how;
  // Activations in `compute`, normalisation statistics in fp32; as built
  // also one fp32 working set and block input (ActivationBytes).
  const int64_t sets = w.activation_checkpointing ? 1 : c.num_layers;
  const int64_t acts = as_built ? ActivationBytes(c, w.micro_batch, w.local_seq_len(), w.activation_checkpointing, w.compute)
                                : (a.residuals + a.saved + a.final_norm) * tb + a.statistics * 4;
  dev.Add(std::string("activations (") + DTypeName(w.compute) + (as_built && cb != 4 ? ", fp32 working set)" : ")"),
          acts,
          std::to_string(c.num_layers + 1) + " residuals + " + std::to_string(sets) + " saved layer set" +
              (sets > 1 ? "s" : "") + " for " + Num(rows) + " tokens");
  int64_t logits = 0;
  if (w.ce_chunks <= 0) {
    logits = logit_rows * c.vocab_size * 4;
    dev.Add("logits (fp32, becomes its gradient)", logits, logits_how);
  } else {
    logits = a.logits * 2 * cb + a.logits / w.ce_chunks * 4;
    dev.Add("logits (" + cname + " + its gradient, fp32 chunk)", logits,
            Num(rows) + " x " + Num(c.vocab_size) + ", upcast in " + std::to_string(w.ce_chunks) + " chunks");
  }
  dev.Add("backward scratch (" + tname + ")", a.scratch * tb, Num(rows) + " tokens x (3d + 3ffn + heads + qkv)");
  int64_t gemm_scratch = 0;
  if (as_built && cb != 4) {
    // Each GEMM casts A and B into two grow-only scratch buffers: A at most
    // the gate/up gradient [rows, 2 ffn] or a loss chunk's logit gradient, B
    // only an activation (a weight is B in the compute type already:
    // GemmArgs::b_dtype, QLoRA's dequantised blocks too), at most [rows, ffn].
    const int64_t f = c.intermediate_size;
    const int64_t a_max = std::max(rows * 2 * f, logit_rows * c.vocab_size);
    const int64_t b_max = rows * f;
    gemm_scratch = (a_max + b_max) * cb;
    dev.Add("GEMM operand casts (" + cname + ")", gemm_scratch, "largest A and B operands of any GEMM x " +
                                                                   std::to_string(cb) + " B (grow-only scratch)");
  }
  AddCpExchange(w, dev);
  dev.Add("CUDA context, cuBLASLt workspace, NCCL buffers", kGpuRuntimeBytes, "fixed allowance");
  const int64_t transient = gathered_bytes + acts + logits + a.scratch * tb + gemm_scratch + CpExchangeBytes(w);
  const int64_t slack = static_cast<int64_t>(kAllocatorSlack * transient);
  dev.Add("allocator fragmentation", slack, "10% of gathered + activation bytes");
  *allowance = kGpuRuntimeBytes + slack;
}

// Host memory of a GPU node: worker processes, offloaded state, checkpoint
// snapshots and HF loading.
void AddGpuHost(const EstimateContext& x, MemoryEstimate& est, int64_t host_state) {
  const Workload& w = x.w;
  const int S = x.S;
  const int64_t shard = x.shard;
  const int64_t cb = w.compute_bytes();
  const std::string sname = w.fp32_master ? DTypeName(w.optimizer_state) : DTypeName(w.compute);
  const std::string& shard_how = x.shard_how;
  const std::vector<int64_t>& numels = x.numels;
  Items host{&est.host};
  const int ranks = est.ranks_per_node;
  host.Add("worker processes", ranks * kGpuWorkerHostBytes, std::to_string(ranks) + " x 1.5 GiB (CUDA runtime, libraries)");
  est.host_allowance = ranks * kGpuWorkerHostBytes;
  if (host_state > 0) {
    const std::string what = w.offload.params ? "offloaded parameters, gradients and AdamW state"
                                              : "offloaded optimizer (" + sname + " master, m, v; fp32 gradients)";
    host.Add(what, ranks * host_state, std::to_string(ranks) + " ranks x " + FormatBytes(host_state) + " (pinned)");
    int64_t max_shard = 0;
    for (int64_t n : numels) max_shard = std::max(max_shard, Layout(n, S).shard_numel);
    const int64_t staging = ranks * 2 * max_shard * std::max<int64_t>(cb, 4);
    host.Add("pinned transfer staging", staging, "2 x largest unit shard per rank");
    est.host_pinned = ranks * host_state + staging;
    est.host_writer_alloc = host_state + staging / ranks;
  }
  // Only replica 0 of each shard writes checkpoints: ranks [0, S) on node 0.
  // An async save keeps a 12 B/param snapshot from the first save on; a
  // synchronous one of on-device state copies into one and frees it after the
  // write; a synchronous one of offloaded state writes the host master and
  // moments in place (Checkpointer::Save).
  // A peft: job's rank 0 alone saves, through host copies of the adapters,
  // m and v freed after the write (SaveLoraCheckpoint).
  const bool peft = w.method != Method::kFull;
  const int writers = peft ? 1 : std::min(ranks, S);
  const bool snapshots =
      w.method == Method::kFull &&
      (w.async_checkpoint || ((w.checkpoint_keep_last > 0 || w.memory_tier_keep_last > 0) && !w.offload.optimizer));
  const int64_t snap_elem = 3 * static_cast<int64_t>(DTypeSize(w.optimizer_state));
  int64_t snapshot = snapshots ? writers * shard * snap_elem : 0;
  est.host_snapshot_per_writer = snapshots ? shard * snap_elem : 0;
  if (peft && w.checkpoint_keep_last > 0)
    snapshot = est.host_snapshot_per_writer = LoraParams(w.model, w.lora_rank, w.lora_targets) * 12;
  est.host_writers = writers;
  // Each rank fills its shards through one host buffer of the largest unit's
  // shard (Trainer::LoadInitialWeights): from its byte ranges of the mapped HF
  // files, or the seeded init. Never during a save: count the larger.
  int64_t max_unit_shard = 0;
  for (int64_t n : numels) max_unit_shard = std::max(max_unit_shard, Layout(n, S).shard_numel);
  const int64_t staged = ranks * max_unit_shard * 4;
  est.host_writer_alloc += std::max(est.host_snapshot_per_writer, max_unit_shard * 4);
  if (snapshot > 0 && peft)
    host.Add("LoRA checkpoint host copies (fp32 adapters, m, v; freed after)", snapshot, "rank 0 x adapters x 12 B");
  else if (snapshot > 0)
    host.Add(w.async_checkpoint ? "async checkpoint snapshot (fp32 p, m, v)"
                                : "checkpoint snapshot while saving (fp32 p, m, v; freed after)",
             snapshot, std::to_string(writers) + " writer ranks x " + shard_how + " x " + std::to_string(snap_elem) + " B");
  if (staged > snapshot)
    host.Add(std::string(w.from_hf ? "HF weights read while loading" : "initial weights staged while loading") +
                 (snapshot > 0 ? " (beyond the snapshot)" : ""),
             staged - snapshot,
             std::to_string(ranks) + " ranks x one unit's shard x 4 B" +
                 (w.from_hf ? " (files memory-mapped, own ranges only)" : ""));
}

}  // namespace

// checkpoint.memory: the tier's tmpfs pages on the node of writer ranks 0..S-1.
void AddMemoryTier(const EstimateContext& x, MemoryEstimate& est) {
  const Workload& w = x.w;
  if (w.method != Method::kFull) return;
  const int ranks = std::max(1, est.ranks_per_node);
  const MemoryTierCost c =
      EstimateMemoryTier(w.memory_tier_keep_last, w.memory_tier_replicas, x.shard,
                         3 * static_cast<int64_t>(DTypeSize(w.optimizer_state)), std::min(ranks, x.S),
                         (std::max(1, w.world) + ranks - 1) / ranks);
  if (c.bytes_per_node <= 0) return;
  Items{&est.host}.Add("memory checkpoint tier (tmpfs: p, m, v as held)", c.bytes_per_node, c.how);
  est.memory_tier_bytes = c.bytes_per_node;
  est.memory_tier_how = c.how;
  est.host_total = Sum(est.host);
}

MemoryEstimate EstimateMemory(const Workload& w, const ClusterSpec& cluster) {
  MemoryEstimate est;
  const EstimateContext x = MakeContext(w);
  if (w.cpu_engine) {
    EstimateCpu(x, cluster, est);
    AddMemoryTier(x, est);
    return est;
  }
  est.ranks_per_node = std::min(std::max(1, w.world), cluster.gpus_per_node);
  // Transient buffers' element size (Workload::fp32_transients).
  const int64_t tb = w.fp32_transients ? 4 : w.compute_bytes();
  Items dev{&est.device};
  int64_t host_state = 0;
  const int64_t gathered_bytes =
      w.method == Method::kFull ? AddFullState(x, dev, tb, &host_state) : AddAdapterState(x, dev, tb);
  AddGpuTransients(x, dev, tb, gathered_bytes, &est.device_allowance);
  est.device_total = Sum(est.device);
  AddGpuHost(x, est, host_state);
  est.host_total = Sum(est.host);
  AddMemoryTier(x, est);
  return est;
}

}  // namespace shard::plan
