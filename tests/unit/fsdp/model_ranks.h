// Micro-batches of a small LlamaModel over an FSDP runtime per rank, ranks as
// threads (local communicator): the harness of the tests that compare two ways
// of running the same step bit for bit (fsdp_store_once_test,
// fsdp_two_byte_compute_test).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/init.h"
#include "shard/model/llama_model.h"
#include "tests/unit/fsdp/runtime_ranks.h"

namespace shard::fsdp_testing {

// Hides GradBufferStoreOnce (the model gets the fp32 full-gradient buffer)
// and/or ParamsDType (the model is told every unit is fp32: only valid when
// the runtime hands out fp32 compute copies).
class Fp32GradAccess : public UnitAccess {
 public:
  explicit Fp32GradAccess(FsdpRuntime* rt) : rt_(rt) {}
  StatusOr<const float*> AcquireParams(int u) override { return rt_->AcquireParams(u); }
  DType ParamsDType(int u) const override { return rt_->ParamsDType(u); }
  Status ReleaseParams(int u) override { return rt_->ReleaseParams(u); }
  StatusOr<float*> GradBuffer(int u) override { return rt_->GradBuffer(u); }
  Status GradsDone(int u) override { return rt_->GradsDone(u); }

 private:
  FsdpRuntime* rt_;
};

struct RankResult {
  std::vector<std::vector<float>> grads;  // this rank's gradient shards
  int64_t peak_transient = 0;
  double loss = 0;
  std::vector<int64_t> padded;  // each unit's padded numel
};

struct RankOptions {
  int world = 2;
  DType precision = DType::kBF16;  // param_dtype, matmul_dtype and activation_dtype
  DType reduce = DType::kF32;
  bool hide_store_once = false;
  int64_t chunk_elems = 0;          // ModelOptions::weight_grad_chunk_elems
  bool two_byte_compute_copy = false;
  bool two_byte_shard = false;      // param_shard_dtype = precision (the offload layout)
  bool activation_checkpointing = false;
  ShardStrategy strategy = ShardStrategy::kFullShard;
  bool forward_only = false;  // ForwardLoss instead of ForwardBackward (no gradients)
  // The second prefetches; with one the transient peak does not depend on
  // when the comm thread finishes a reduce-scatter.
  int micro_batches = 2;
};

inline LlamaConfig Small() {
  LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 56;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.max_position_embeddings = 64;
  return c;
}

// Initialises this rank's slice [begin, begin + shard_numel) of every unit
// (padding 0) as the runtime stores it.
inline void InitShards(const ParamLayout& layout, FsdpRuntime& rt, Backend* be, int rank) {
  for (int u = 0; u < rt.num_units(); ++u) {
    const ShardLayout& l = rt.layout(u);
    std::vector<float> fp32(static_cast<size_t>(l.shard_numel));
    InitUnitParams(layout.units[u], u, 41, 0.1f, l.begin(rank), l.begin(rank) + l.shard_numel, fp32.data());
    be->CastFromF32(fp32.data(), rt.param_shard(u), l.shard_numel, rt.param_shard_dtype());
  }
}

inline std::vector<RankResult> RunRanks(const LlamaConfig& c, const RankOptions& o) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-model-ranks-" + std::to_string(group++) + "/";
  std::vector<RankResult> out(o.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.world; ++r) {
    threads.emplace_back([&, r] {
      auto backend = CreateBackend("cpu");
      ASSERT_TRUE(backend.ok());
      std::unique_ptr<Communicator> comm = LocalComm(o.world, r, prefix);
      ModelOptions mo;
      mo.max_batch = 2;
      mo.max_seq = 8;
      mo.matmul_dtype = o.precision;
      mo.activation_dtype = o.precision;
      mo.weight_grad_chunk_elems = o.chunk_elems;
      mo.activation_checkpointing = o.activation_checkpointing;
      auto model = LlamaModel::Create(c, backend->get(), mo);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      const ParamLayout& layout = (*model)->layout();
      std::vector<int64_t> numels;
      for (const auto& u : layout.units) numels.push_back(u.numel);
      FsdpOptions fo;
      fo.strategy = o.strategy;
      fo.param_dtype = o.precision;
      fo.reduce_dtype = o.reduce;
      fo.two_byte_compute_copy = o.two_byte_compute_copy;
      if (o.two_byte_shard) fo.param_shard_dtype = o.precision;
      auto rt = FsdpRuntime::Create(backend->get(), numels, fo, std::move(comm), nullptr);
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      InitShards(layout, **rt, backend->get(), r);
      std::vector<int32_t> tokens(16), targets(16), pos(16);
      for (int i = 0; i < 16; ++i) {
        tokens[i] = (i * 37 + 5 * r) % static_cast<int>(c.vocab_size);
        targets[i] = (i * 11 + 3 + r) % static_cast<int>(c.vocab_size);
        pos[i] = i % 8;
      }
      DeviceBatch b{2, 8, tokens.data(), targets.data(), pos.data(), nullptr};
      (*rt)->ZeroGrads();
      Fp32GradAccess fp32(rt->get());
      UnitAccess& access = o.hide_store_once ? static_cast<UnitAccess&>(fp32) : static_cast<UnitAccess&>(**rt);
      for (int mb = 0; mb < o.micro_batches; ++mb) {
        (*rt)->BeginMicroBatch();
        auto loss = o.forward_only ? (*model)->ForwardLoss(b, access) : (*model)->ForwardBackward(b, access, 0.05f);
        ASSERT_TRUE(loss.ok()) << loss.status().ToString();
        ASSERT_TRUE((*rt)->FinishMicroBatch().ok());
        out[r].loss += *loss;
      }
      ASSERT_TRUE((*rt)->FinishGradients().ok());
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        out[r].grads.emplace_back((*rt)->grad_shard(u), (*rt)->grad_shard(u) + (*rt)->layout(u).shard_numel);
        out[r].padded.push_back((*rt)->layout(u).padded);
      }
      out[r].peak_transient = (*rt)->peak_transient_bytes();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace shard::fsdp_testing
