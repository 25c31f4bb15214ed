// The activation and formatting pieces of the memory model (memory_model.h):
// one micro-batch's LlamaModel buffers in elements and bytes.
#include <algorithm>
#include <cstdio>

#include "shard/plan/memory_model.h"
#include "shard/plan/moe_model.h"

namespace shard::plan {

ActivationElems Activations(const LlamaConfig& c, int64_t micro_batch, int64_t seq_len, bool checkpointing) {
  const int64_t n = micro_batch * seq_len, d = c.hidden_size, f = DenseMlpWidth(c);
  const int64_t hq = static_cast<int64_t>(c.num_heads) * c.head_dim(), qkv = c.qkv_dim();
  const int64_t sets = checkpointing ? 1 : c.num_layers;
  ActivationElems a;
  a.residuals = (c.num_layers + 1) * n * d;
  // xn1, qkv, attn, x_mid, xn2, gu (2f), h (f)
  a.saved = sets * n * (3 * d + qkv + hq + 3 * f);
  a.statistics = sets * n * (2 + c.num_heads);  // rstd1, rstd2, lse
  a.final_norm = n * d + n;
  a.logits = n * c.vocab_size;
  // grad_a, grad_b, scratch_d (d each), scratch_ffn (f), scratch_attn (hq), scratch_qkv, scratch_gu (2f)
  a.scratch = n * (3 * d + 3 * f + hq + qkv);
  a.rope = seq_len * c.head_dim();
  // Family extras (shard/model/qkv_extras): qwen2's ones vector for the q/k/v
  // biases; qwen3's pre-norm q and k heads and their rstd per saved set, plus
  // two [n, hq] scratch buffers.
  if (c.qkv_bias()) a.scratch += n;
  if (c.qk_norm()) {
    const int64_t heads = c.num_heads + c.num_kv_heads;
    a.saved += sets * n * heads * c.head_dim();
    a.statistics += sets * n * heads;
    a.scratch += 2 * n * hq;
  }
  const MoeActivationElems moe = MoeActivations(c, n, static_cast<int>(sets));  // routed rows (moe_model.h)
  a.saved += moe.saved, a.scratch += moe.scratch;
  return a;
}

int64_t ActivationBytes(const LlamaConfig& c, int64_t micro_batch, int64_t seq_len, bool checkpointing, DType act) {
  const ActivationElems a = Activations(c, micro_batch, seq_len, checkpointing);
  if (act == DType::kF32) return (a.residuals + a.saved + a.statistics + a.final_norm) * 4;
  const int64_t n = micro_batch * seq_len, d = c.hidden_size, f = DenseMlpWidth(c);
  const int64_t hq = static_cast<int64_t>(c.num_heads) * c.head_dim();
  const int64_t sets = checkpointing ? 1 : c.num_layers;
  const int64_t big = n * (3 * d + c.qkv_dim() + hq + 3 * f), stats = n * (2 + c.num_heads);  // one LayerActs set
  const int64_t extras = (a.saved - sets * big) + (a.statistics - sets * stats);  // QkvExtras, fp32 per set
  const int64_t ab = static_cast<int64_t>(DTypeSize(act));
  const int64_t kept = checkpointing ? 0 : c.num_layers * (big * ab + stats * 4);  // two-byte sets + fp32 statistics
  return a.residuals * ab + n * d * 4 + (big + stats) * 4 + kept + extras * 4 + a.final_norm * 4;
}

std::string FormatBytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024 * 1024) std::snprintf(buf, sizeof(buf), "%.2f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  else if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace shard::plan
