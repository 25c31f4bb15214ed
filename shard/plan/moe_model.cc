#include "shard/plan/moe_model.h"

#include <algorithm>
#include <cstdio>

namespace shard::plan {
namespace {

// Parameters of the E - k experts a token does not run, over all sparse layers.
int64_t UnchosenExpertParams(const LlamaConfig& c) {
  if (!c.is_moe()) return 0;
  const int64_t per_expert = 3 * c.hidden_size * c.moe.expert_intermediate_size;
  return static_cast<int64_t>(c.num_sparse_layers()) * (c.moe.num_experts - c.moe.experts_per_tok) * per_expert;
}

}  // namespace

int64_t MoeActiveParams(const LlamaConfig& c) { return c.NumParams() - UnchosenExpertParams(c); }

int64_t ActiveMatmulParams(const LlamaConfig& c) { return c.NumMatmulParams() - UnchosenExpertParams(c); }

MoeActivationElems MoeActivations(const LlamaConfig& c, int64_t rows, int sets) {
  MoeActivationElems a;
  if (!c.is_moe()) return a;
  // MoeMlp::Create: every buffer at least one float.
  auto at_least1 = [](int64_t n) { return std::max<int64_t>(n, 1); };
  const int64_t n = rows, E = c.moe.num_experts, k = c.moe.experts_per_tok, nk = n * k;
  const int64_t d = c.hidden_size, fe = c.moe.expert_intermediate_size;
  a.routed_rows = nk;
  // Per set: probs [n, E]; expert, weight, perm [nk]; offsets [E+1]; gu [nk, 2fe], h [nk, fe], y [nk, d].
  const int64_t set = at_least1(n * E) + 3 * at_least1(nk) + (E + 1) + at_least1(nk * 2 * fe) + at_least1(nk * fe) +
                      at_least1(nk * d);
  a.saved = sets * set;
  // logits, dprobs [n, E]; xp, dy, dxp [nk, d]; dh [nk, fe]; dgu [nk, 2fe]; dweight, weight_lp [nk].
  a.scratch = 2 * at_least1(n * E) + 3 * at_least1(nk * d) + at_least1(nk * fe) + at_least1(nk * 2 * fe) +
              2 * at_least1(nk);
  if (c.moe.has_shared_expert()) {  // qwen2_moe: per set sgu [n, 2fs], sh [n, fs], sy [n, d], g [n];
    const int64_t fs = c.moe.shared_expert_intermediate_size;  // scratch ident, dg [n], dsy, dsh, dsgu
    a.saved += sets * (at_least1(n * 2 * fs) + at_least1(n * fs) + at_least1(n * d) + at_least1(n));
    a.scratch += 2 * at_least1(n) + at_least1(n * d) + at_least1(n * fs) + at_least1(n * 2 * fs);
  }
  return a;
}

int64_t DenseMlpWidth(const LlamaConfig& c) {
  return c.is_moe() && c.num_sparse_layers() == c.num_layers ? 1 : c.intermediate_size;
}

std::string MoeSummary(const LlamaConfig& c) {
  if (!c.is_moe()) return {};
  auto count = [](double n) {
    char b[32];
    std::snprintf(b, sizeof(b), n >= 1e9 ? "%.2fB" : "%.2fM", n >= 1e9 ? n / 1e9 : n / 1e6);
    return std::string(b);
  };
  return count(static_cast<double>(c.NumParams())) + " total, " + count(static_cast<double>(MoeActiveParams(c))) +
         " active: " + std::to_string(c.moe.num_experts) + " experts, top-" + std::to_string(c.moe.experts_per_tok) +
         ", " + std::to_string(c.num_sparse_layers()) + " sparse layers";
}

}  // namespace shard::plan
