#include "shard/plan/gather_sim.h"

#include <set>

#include "shard/spec/param_layout.h"

namespace shard::plan {

// The acquisition order of one Llama micro-batch through FsdpRuntime, and at
// each moment which units are held and which gradients exist (see
// LlamaModel::ForwardBackward and FsdpRuntime::AcquireParams/GradsDone).
GatherPeak SimulateGathers(const UnitBytes& b, int num_layers, bool tied, int prefetch, bool keep_forward) {
  const int E = 0, H = num_layers + 1;
  auto block = [](int l) { return 1 + l; };
  struct Event {
    int unit;
    std::set<int> held;
  };
  std::vector<Event> fwd, bwd;
  fwd.push_back({E, {E}});
  for (int l = 0; l < num_layers; ++l) fwd.push_back({block(l), {block(l)}});
  fwd.push_back({H, {H}});
  if (tied) fwd.push_back({E, {H, E}});
  for (int l = num_layers - 1; l >= 0; --l) bwd.push_back({block(l), {block(l)}});
  std::vector<int> order;
  for (const auto& e : fwd) order.push_back(e.unit);
  for (const auto& e : bwd) order.push_back(e.unit);

  auto params_at = [&](size_t k, const std::set<int>& held, const std::set<int>& kept) {
    std::set<int> live = held;
    live.insert(kept.begin(), kept.end());
    for (size_t j = k + 1; j <= k + static_cast<size_t>(prefetch) && j < order.size(); ++j) live.insert(order[j]);
    int64_t s = 0;
    for (int u : live) s += b.gathered[u];
    return s;
  };
  auto grads_of = [&](std::initializer_list<int> full, int in_flight) {
    int64_t s = 0;
    for (int u : full) s += b.grad[u] + b.grad_shard[u];
    if (in_flight >= 0)  // no grad_in_flight given: as while computed
      s += b.grad_in_flight.empty() ? b.grad[in_flight] + b.grad_shard[in_flight] : b.grad_in_flight[in_flight];
    return s;
  };

  auto cast = [&](int u) { return b.cast.empty() ? int64_t{0} : b.cast[u]; };
  GatherPeak peak;
  auto consider = [&](int64_t params, int64_t grads) {
    if (params + grads > peak.total) peak = {params, grads, params + grads};
  };
  std::set<int> kept;  // shard_grad_op: forward gathers kept for backward
  for (size_t k = 0; k < fwd.size(); ++k) {
    consider(params_at(k, fwd[k].held, kept), 0);
    if (keep_forward) kept.insert(fwd[k].held.begin(), fwd[k].held.end());
  }
  // Head backward: head (and tied embedding) still held from the forward.
  const size_t head_event = fwd.size() - 1;
  const int64_t head_params = params_at(head_event, fwd[head_event].held, kept);
  consider(head_params, (tied ? grads_of({H, E}, -1) : grads_of({H}, -1)) + cast(H));
  if (keep_forward) kept.erase(H);  // the head's gradients are done: freed
  int prev = H;
  for (size_t k = 0; k < bwd.size(); ++k) {
    const int u = bwd[k].unit;
    int64_t grads = grads_of({u}, prev);
    if (tied) grads += b.grad[E];  // the embedding's gradient lives until the end
    // shard_grad_op: a forward gather is kept until its unit's backward is
    // done (GradsDone, then ReleaseParams frees it).
    consider(params_at(fwd.size() + k, bwd[k].held, kept), grads + cast(u));
    if (keep_forward) kept.erase(u);
    prev = u;
  }
  // Embedding backward: a scatter-add, no parameters.
  consider(0, grads_of({E}, prev) + cast(E));
  return peak;
}

UnitBytes ElementWeights(const std::vector<int64_t>& numels, int shards, bool grads) {
  UnitBytes b;
  for (int64_t n : numels) {
    ShardLayout l = Layout(n, shards);
    b.gathered.push_back(l.padded);
    b.grad.push_back(grads ? l.padded : 0);
    b.grad_shard.push_back(grads && shards > 1 ? l.shard_numel : 0);
    b.grad_in_flight.push_back(b.grad.back() + b.grad_shard.back());
  }
  return b;
}

std::vector<int64_t> UnitNumels(const LlamaConfig& config) {
  ParamLayout layout = ParamLayout::ForLlama(config);
  std::vector<int64_t> n;
  for (const auto& u : layout.units) n.push_back(u.numel);
  return n;
}

int64_t ShardNumel(const std::vector<int64_t>& unit_numels, int shards) {
  int64_t s = 0;
  for (int64_t n : unit_numels) s += Layout(n, shards).shard_numel;
  return s;
}

int64_t PaddedNumel(const std::vector<int64_t>& unit_numels, int shards) {
  int64_t s = 0;
  for (int64_t n : unit_numels) s += Layout(n, shards).padded;
  return s;
}

GatherPeak GatheredPeak(const LlamaConfig& config, int shards, int prefetch, bool keep_forward_gathers) {
  return SimulateGathers(ElementWeights(UnitNumels(config), shards, true), config.num_layers,
                         config.tie_word_embeddings, prefetch, keep_forward_gathers);
}

}  // namespace shard::plan
