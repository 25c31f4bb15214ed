#include "shard/plan/cp_cost.h"

#include <algorithm>

namespace shard::plan {
namespace {

// Elements of one layer's K/V for the micro-batch's whole sequences.
double KvElems(const Workload& w) {
  const LlamaConfig& c = w.model;
  return static_cast<double>(w.micro_batch) * static_cast<double>(w.seq_len) * 2.0 * c.num_kv_heads * c.head_dim();
}

}  // namespace

int64_t CpExchangeBytes(const Workload& w) {
  const int C = w.context_parallel;
  if (C <= 1) return 0;
  const LlamaConfig& c = w.model;
  const double b = static_cast<double>(w.micro_batch), S = static_cast<double>(w.seq_len);
  const double kvw = 2.0 * c.num_kv_heads * c.head_dim(), hq = static_cast<double>(c.num_heads) * c.head_dim();
  const double chunk = S / (2.0 * C);
  // CpAttention's grow-only buffers: three of the whole K/V, two of the local K/V, four of a chunk's q/out.
  double floats = 3 * b * S * kvw + 2 * b * (S / C) * kvw + 4 * b * chunk * hq;
  // A GPU backend rounds the whole K/V and a chunk's q for two-byte compute (fp32 copies).
  if (!w.cpu_engine && w.compute != DType::kF32) floats += b * S * kvw + b * chunk * hq;
  return static_cast<int64_t>(floats * 4.0);
}

double CpExchangeSeconds(const Workload& w, const ClusterSpec& cluster) {
  const int C = w.context_parallel;
  if (C <= 1) return 0;
  const double ring = static_cast<double>(C - 1) / C;
  const double per_layer = 3.0 * ring * KvElems(w) * 4.0;  // gather fwd, gather bwd, reduce-scatter dK/dV
  return w.model.num_layers * per_layer / (cluster.CollectiveGBs(C) * 1e9);
}

std::vector<int> CpCandidates(const Workload& w) {
  std::vector<int> out;
  const int world = std::max(1, w.world);
  for (int c = std::max(1, w.context_parallel) * 2; c <= world; c *= 2)
    if (world % c == 0 && w.seq_len % (2LL * c) == 0) out.push_back(c);
  return out;
}

}  // namespace shard::plan
