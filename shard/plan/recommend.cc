// Recommendations: candidate changes to a plan's workload, each re-planned with
// the same models, kept when they fit (or, for a plan that fits, when they are
// faster and still fit), ranked by predicted tokens/s.
#include <algorithm>
#include <set>

#include "shard/plan/cp_cost.h"
#include "shard/plan/planner.h"

namespace shard::plan {
namespace {

struct Candidate {
  Workload w;
  ClusterSpec cluster;
  std::set<std::string> changes;  // short names, for dominance between candidates
  std::vector<std::string> describe;
  std::vector<std::string> sets;
  bool other_cluster = false;
  bool supported = true;
  std::string note;
};

Recommendation Evaluate(const Candidate& c, Plan* out = nullptr) {
  Plan p = PlanWorkload(c.w, c.cluster);
  Recommendation r;
  for (const auto& d : c.describe) r.change += (r.change.empty() ? "" : " + ") + d;
  r.sets = c.sets;
  r.cluster = c.other_cluster ? c.cluster.name : "";
  r.supported = c.supported;
  r.verdict = p.verdict;
  r.device_bytes = p.memory.device_total;
  r.host_bytes = p.memory.host_total;
  r.tokens_per_s = p.time.tokens_per_s;
  r.mfu = p.time.mfu;
  r.note = c.note;
  if (out) *out = std::move(p);
  return r;
}

bool Fits(const Recommendation& r) { return r.verdict == Verdict::kFits || r.verdict == Verdict::kTight; }

// Rounds the global batch up so every rank gets whole micro-batches.
int64_t GlobalBatchFor(const Workload& w) {
  const int64_t per = w.micro_batch * w.data_ranks();
  return (w.global_batch + per - 1) / per * per;
}

// Every combination of the knobs a job file has, starting from `base`.
std::vector<Candidate> Variations(const Candidate& base, bool speed) {
  const Workload& w = base.w;
  std::vector<Candidate> out{base};
  auto expand = [&](auto&& fn) {
    std::vector<Candidate> next;
    for (const auto& c : out) {
      next.push_back(c);
      Candidate v = c;
      if (fn(v)) next.push_back(std::move(v));
    }
    out = std::move(next);
  };
  // Activation checkpointing.
  expand([&](Candidate& c) {
    if (speed == !c.w.activation_checkpointing) return false;
    c.w.activation_checkpointing = !speed;
    c.changes.insert("ac");
    c.describe.push_back(speed ? "no activation checkpointing" : "activation checkpointing");
    c.sets.push_back(std::string("parallel.activation_checkpointing=") + (speed ? "false" : "true"));
    return true;
  });
  if (!w.cpu_engine && w.method == Method::kFull) {
    expand([&](Candidate& c) {
      if (speed == !c.w.offload.optimizer) return false;
      c.w.offload.optimizer = !speed;
      c.changes.insert("offload");
      c.describe.push_back(speed ? "optimizer on the GPU" : "optimizer offloaded to host memory");
      c.sets.push_back(std::string("parallel.offload_optimizer=") + (speed ? "false" : "true"));
      return true;
    });
  }
  // Micro-batch: halvings when memory is short, doublings when it is not.
  {
    std::vector<Candidate> next;
    for (const auto& c : out) {
      next.push_back(c);
      for (int64_t mb = speed ? c.w.micro_batch * 2 : c.w.micro_batch / 2; speed ? mb <= c.w.micro_batch * 4 : mb >= 1;
           mb = speed ? mb * 2 : mb / 2) {
        Candidate v = c;
        v.w.micro_batch = mb;
        const int64_t per = mb * v.w.data_ranks();
        if (v.w.global_batch % per != 0) continue;  // keep the global batch as it is
        if (mb % v.w.rows_per_item != 0) continue;  // whole preference pairs (2 rows each)
        const int64_t items = mb / v.w.rows_per_item;  // the job file's unit: sequences, or pairs
        v.changes.insert("mb");
        v.describe.push_back("micro-batch " + std::to_string(items));
        v.sets.push_back("train.micro_batch=" + std::to_string(items));
        next.push_back(std::move(v));
      }
    }
    out = std::move(next);
  }
  if (!speed && w.strategy != ShardStrategy::kFullShard) {
    expand([&](Candidate& c) {
      c.w.strategy = ShardStrategy::kFullShard;
      c.w.shard_group_size = 0;
      c.changes.insert("strategy");
      c.describe.push_back("full_shard");
      c.sets.push_back("parallel.strategy=full_shard");
      return true;
    });
  }
  if (!speed && w.async_checkpoint) {
    expand([&](Candidate& c) {
      c.w.async_checkpoint = false;
      c.changes.insert("async");
      c.describe.push_back("synchronous checkpoints (no host snapshot)");
      c.sets.push_back("checkpoint.async=false");
      return true;
    });
  }
  if (!speed) {
    // Context parallelism: the sequence over C ranks, activations / C.
    std::vector<Candidate> next;
    for (const auto& c : out) {
      next.push_back(c);
      for (int cp : CpCandidates(c.w)) {
        Candidate v = c;
        v.w.context_parallel = cp;
        v.changes.insert("cp");
        v.describe.push_back("context parallelism " + std::to_string(cp) + " (" +
                             std::to_string(v.w.local_seq_len()) + " tokens per rank)");
        v.sets.push_back("parallel.context_parallel=" + std::to_string(cp));
        next.push_back(std::move(v));
      }
    }
    out = std::move(next);
  }
  out.erase(out.begin());  // the base itself
  return out;
}

// A precision the cluster can run, when the base's cannot or is fp32 on a GPU.
void FixPrecision(Candidate* c) {
  if (c->w.cpu_engine) return;
  const bool bf16 = c->cluster.gpu.bf16;
  if (c->w.compute == DType::kF32 || (c->w.compute == DType::kBF16 && !bf16)) {
    c->w.compute = bf16 ? DType::kBF16 : DType::kF16;
    c->changes.insert("precision");
    c->describe.push_back(bf16 ? "bf16 mixed precision" : "fp16 mixed precision with loss scaling");
    c->sets.push_back(std::string("train.precision=") + (bf16 ? "bf16" : "fp16"));
  }
}

// Keeps fitting candidates not dominated by a fitting one with a subset of its
// changes that is at least nearly as fast; best first.
// With `headroom`, only candidates that fit without being tight count.
std::vector<Recommendation> Best(const std::vector<Candidate>& cands, size_t limit, double min_tokens = 0,
                                 bool headroom = false) {
  std::vector<std::pair<const Candidate*, Recommendation>> fit;
  for (const auto& c : cands) {
    Recommendation r = Evaluate(c);
    const bool ok = headroom ? r.verdict == Verdict::kFits : Fits(r);
    if (ok && r.tokens_per_s > min_tokens) fit.emplace_back(&c, std::move(r));
  }
  std::vector<Recommendation> out;
  for (size_t i = 0; i < fit.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < fit.size() && !dominated; ++j) {
      if (i == j) continue;
      const auto& a = fit[i].first->changes;
      const auto& b = fit[j].first->changes;
      const bool subset = b.size() < a.size() && std::includes(a.begin(), a.end(), b.begin(), b.end());
      if (subset && fit[j].second.tokens_per_s >= 0.95 * fit[i].second.tokens_per_s) dominated = true;
    }
    if (!dominated) out.push_back(fit[i].second);
  }
  std::stable_sort(out.begin(), out.end(), [](const Recommendation& a, const Recommendation& b) {
    return a.tokens_per_s > b.tokens_per_s;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

Candidate Start(const Plan& plan) {
  Candidate c;
  c.w = plan.workload;
  c.cluster = plan.cluster;
  return c;
}

Candidate WithWorld(Candidate c, int world) {
  if (world == c.w.world) return c;
  c.w.world = world;
  c.changes.insert("world");
  c.describe.push_back(std::to_string(world) + " GPUs");
  c.sets.push_back("parallel.world_size=" + std::to_string(world));
  if (c.w.strategy == ShardStrategy::kHybridShard && c.w.shard_group_size > 0 && world % c.w.shard_group_size != 0)
    c.w.shard_group_size = 0;
  const int64_t g = GlobalBatchFor(c.w);
  if (g != c.w.global_batch) {
    c.w.global_batch = g;
    c.sets.push_back("train.global_batch=" + std::to_string(g / c.w.rows_per_item));  // rows per pair
  }
  return c;
}

// Adapters instead of full weights, with activation checkpointing, on `base`'s GPUs.
Candidate Adapters(Candidate c, Method m) {
  c.w.method = m;
  c.w.offload = {};
  c.w.activation_checkpointing = true;
  c.supported = true;
  c.changes = {"method"};
  std::string what = m == Method::kQlora ? "QLoRA (4-bit NF4 base, rank-16 adapters"
                                         : "LoRA (frozen " + std::string(DTypeName(c.w.base_dtype())) + " base, rank-16 adapters";
  what += c.w.world > 1 ? ", base sharded over " + std::to_string(c.w.world) + " GPUs)" : ")";
  c.describe = {what};
  c.sets.clear();
  c.note = std::string("add peft: {method: ") + (m == Method::kLora ? "lora" : "qlora") +
           ", r: 16, target_modules: all-linear} to the job file";
  return c;
}

// Host memory is what fails with the state offloaded and no other knob of
// the job file fixes it here: bf16 master weights and moments
// (optim.state_dtype: bf16) fit where fp32 cannot — said with its numbers.
std::vector<Recommendation> Bf16State(const Plan& plan, const Candidate& base) {
  const Workload& w = plan.workload;
  if (!(w.method == Method::kFull && w.fp32_master && w.optimizer_state == DType::kF32 && w.offload.optimizer &&
        static_cast<double>(plan.memory.host_total) > plan.host_capacity_bytes()))
    return {};
  Candidate s = base;
  s.w.optimizer_state = DType::kBF16;
  s.changes.insert("state_dtype");
  s.sets.push_back("optim.state_dtype=bf16");
  s.describe.push_back("bf16 optimizer state (master weights and AdamW moments in bf16: " +
                       std::to_string(s.w.offloaded_state_bytes()) + " B/param on the host instead of " +
                       std::to_string(w.offloaded_state_bytes()) + ")");
  s.note = "fp32 state cannot fit this host; bf16 state is updated with stochastic rounding, which keeps "
           "training close to fp32 (docs/optimizer-state.md)";
  // With whatever else this hardware needs (a smaller micro-batch, ...).
  std::vector<Candidate> cands = Variations(s, false);
  cands.insert(cands.begin(), s);
  return Best(cands, 1);
}

// Other clusters: the cheapest settings that fit on each, fewest GPUs first
// (at most 3).
std::vector<Recommendation> OtherClusters(const Plan& plan, const HardwareCatalog& catalog, const Candidate& base) {
  struct Move {
    int gpus;
    bool same_gpu;
    Recommendation rec;
  };
  std::vector<Move> moves;
  for (const auto& [name, cl] : catalog.clusters) {
    if (name == plan.cluster.name) continue;
    Candidate c = base;
    c.cluster = cl;
    c.other_cluster = true;
    c.changes.clear();
    c.describe.clear();
    c.sets.clear();
    FixPrecision(&c);
    c = WithWorld(c, cl.total_gpus());
    std::vector<Candidate> cands = Variations(c, false);
    cands.insert(cands.begin(), c);
    auto best = Best(cands, 8);
    if (best.empty()) continue;
    // Fewest changes wins on a cluster; speed breaks ties.
    auto pick = std::min_element(best.begin(), best.end(), [](const Recommendation& a, const Recommendation& b) {
      return a.sets.size() != b.sets.size() ? a.sets.size() < b.sets.size() : a.tokens_per_s > b.tokens_per_s;
    });
    Recommendation r = *pick;
    r.change = "cluster " + name + (r.change.empty() ? "" : ": " + r.change);
    moves.push_back({cl.total_gpus(), cl.gpu.name == plan.cluster.gpu.name, std::move(r)});
  }
  // Fewest GPUs first; the same GPU model before others; then speed.
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) {
    if (a.gpus != b.gpus) return a.gpus < b.gpus;
    if (a.same_gpu != b.same_gpu) return a.same_gpu;
    return a.rec.tokens_per_s > b.rec.tokens_per_s;
  });
  std::vector<Recommendation> out;
  for (size_t i = 0; i < moves.size() && i < 3; ++i) out.push_back(std::move(moves[i].rec));
  return out;
}

// LoRA, then QLoRA, on every GPU of the plan's cluster.
std::vector<Recommendation> AdaptersHere(const Plan& plan, const Candidate& base) {
  std::vector<Recommendation> out;
  Candidate here = WithWorld(base, plan.cluster.total_gpus());
  for (Method m : {Method::kLora, Method::kQlora}) {
    Candidate a = Adapters(here, m);
    std::vector<Candidate> cands{a};
    for (auto& v : Variations(a, false)) cands.push_back(std::move(v));
    auto best = Best(cands, 1);
    if (!best.empty()) out.push_back(std::move(best.front()));
  }
  return out;
}

}  // namespace

std::vector<Recommendation> Recommend(const Plan& plan, const HardwareCatalog& catalog) {
  std::vector<Recommendation> recs;
  const Workload& w = plan.workload;
  if (plan.ok()) {
    // Faster settings that still fit.
    std::vector<Candidate> cands = Variations(Start(plan), /*speed=*/true);
    for (auto& r : Best(cands, 3, plan.time.tokens_per_s * 1.05, /*headroom=*/true)) recs.push_back(std::move(r));
    return recs;
  }

  // Same hardware, same GPUs.
  Candidate base = Start(plan);
  FixPrecision(&base);
  {
    std::vector<Candidate> cands = Variations(base, /*speed=*/false);
    if (!base.changes.empty()) cands.insert(cands.begin(), base);
    for (auto& r : Best(cands, 3)) recs.push_back(std::move(r));
  }
  if (w.cpu_engine) return recs;

  // Listed first, after the others are chosen.
  const std::vector<Recommendation> state_rec = recs.empty() ? Bf16State(plan, base) : std::vector<Recommendation>{};

  // Every GPU of this cluster (or only as many as it has).
  if (w.world != plan.cluster.total_gpus()) {
    Candidate all = WithWorld(base, plan.cluster.total_gpus());
    std::vector<Candidate> cands = Variations(all, false);
    cands.insert(cands.begin(), all);
    for (auto& r : Best(cands, 1)) recs.push_back(std::move(r));
  }

  if (recs.empty())
    for (auto& r : OtherClusters(plan, catalog, base)) recs.push_back(std::move(r));

  // Adapters on the hardware at hand when full fine-tuning does not fit it
  // (not for mixture-of-experts models: peft: on MoE is not built).
  if (w.method == Method::kFull && !w.model.is_moe()) {
    bool any_here = false;
    for (const auto& r : recs) any_here |= r.cluster.empty();
    if (!any_here)
      for (auto& r : AdaptersHere(plan, base)) recs.push_back(std::move(r));
  }
  recs.insert(recs.begin(), state_rec.begin(), state_rec.end());
  return recs;
}

}  // namespace shard::plan
