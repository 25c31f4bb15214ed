// Two-byte transient gradients (issue 19 item 2): under a two-byte
// reduce_dtype a sharded unit's unsharded gradient is handed to the model as
// the reduce_dtype buffer itself (UnitAccess::GradBufferStoreOnce), which the
// model fills block by block through a bounded fp32 chunk — so no fp32 copy of
// the whole unit exists. Ranks as threads (local communicator): the reduced
// gradient shards are bit for bit the fp32-buffer path's (which rounds the
// same fp32 values once, later), and the runtime holds fewer transient bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <thread>

#include "shard/fsdp/fsdp_runtime.h"
#include "shard/model/init.h"
#include "shard/model/llama_model.h"

namespace shard {
namespace {

// Hides GradBufferStoreOnce: the model gets the fp32 full-gradient buffer,
// as before two-byte transient gradients existed.
class Fp32GradAccess : public UnitAccess {
 public:
  explicit Fp32GradAccess(FsdpRuntime* rt) : rt_(rt) {}
  StatusOr<const float*> AcquireParams(int u) override { return rt_->AcquireParams(u); }
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
};

// One micro-batch of the model over an FSDP runtime per rank (W threads).
std::vector<RankResult> RunRanks(const LlamaConfig& c, int world, DType precision, DType reduce, bool hide_store_once,
                            int64_t chunk_elems) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-store-once-" + std::to_string(group++) + "/";
  std::vector<RankResult> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto backend = CreateBackend("cpu");
      ASSERT_TRUE(backend.ok());
      CommConfig cc;
      cc.backend = "local";
      cc.rank = r;
      cc.world_size = world;
      cc.prefix = prefix;
      auto comm = CreateCommunicator(cc);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      ModelOptions mo;
      mo.max_batch = 2;
      mo.max_seq = 8;
      mo.matmul_dtype = precision;
      mo.activation_dtype = precision;
      mo.weight_grad_chunk_elems = chunk_elems;
      auto model = LlamaModel::Create(c, backend->get(), mo);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      const ParamLayout& layout = (*model)->layout();
      std::vector<int64_t> numels;
      for (const auto& u : layout.units) numels.push_back(u.numel);
      FsdpOptions fo;
      fo.param_dtype = precision;
      fo.reduce_dtype = reduce;
      auto rt = FsdpRuntime::Create(backend->get(), numels, fo, std::move(*comm), nullptr);
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        const ShardLayout& l = (*rt)->layout(u);
        // This rank's slice [begin, begin + shard_numel); padding gets 0.
        InitUnitParams(layout.units[u], u, 41, 0.1f, l.begin(r), l.begin(r) + l.shard_numel, (*rt)->param_shard(u));
      }
      std::vector<int32_t> tokens(16), targets(16), pos(16);
      for (int i = 0; i < 16; ++i) {
        tokens[i] = (i * 37 + 5 * r) % static_cast<int>(c.vocab_size);
        targets[i] = (i * 11 + 3 + r) % static_cast<int>(c.vocab_size);
        pos[i] = i % 8;
      }
      DeviceBatch b{2, 8, tokens.data(), targets.data(), pos.data(), nullptr};
      (*rt)->ZeroGrads();
      (*rt)->BeginMicroBatch();
      Fp32GradAccess fp32(rt->get());
      UnitAccess& access = hide_store_once ? static_cast<UnitAccess&>(fp32) : static_cast<UnitAccess&>(**rt);
      auto loss = (*model)->ForwardBackward(b, access, 0.05f);
      ASSERT_TRUE(loss.ok()) << loss.status().ToString();
      ASSERT_TRUE((*rt)->FinishMicroBatch().ok());
      ASSERT_TRUE((*rt)->FinishGradients().ok());
      out[r].loss = *loss;
      for (int u = 0; u < (*rt)->num_units(); ++u)
        out[r].grads.emplace_back((*rt)->grad_shard(u), (*rt)->grad_shard(u) + (*rt)->layout(u).shard_numel);
      out[r].peak_transient = (*rt)->peak_transient_bytes();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

LlamaConfig Small() {
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

// Blocks stored straight into the bf16/fp16 buffer give the same reduced
// shards, bit for bit, as the fp32 buffer cast down at GradsDone; with
// weight-gradient chunks of 64 elements (two GEMM rows of the widest weight)
// too. The runtime's transient peak drops.
TEST(FsdpStoreOnce, TwoByteBlockGradientsAreTheCastFp32Ones) {
  const LlamaConfig c = Small();
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const auto cast = RunRanks(c, 2, dt, dt, /*hide_store_once=*/true, 0);
    const auto stored = RunRanks(c, 2, dt, dt, /*hide_store_once=*/false, 0);
    const auto chunked = RunRanks(c, 2, dt, dt, /*hide_store_once=*/false, 64);
    ASSERT_EQ(cast.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(stored[r].loss, cast[r].loss);
      for (size_t u = 0; u < cast[r].grads.size(); ++u) {
        EXPECT_EQ(stored[r].grads[u], cast[r].grads[u]) << DTypeName(dt) << " rank " << r << " unit " << u;
        EXPECT_EQ(chunked[r].grads[u], cast[r].grads[u]) << DTypeName(dt) << " chunked, rank " << r << " unit " << u;
      }
      EXPECT_LT(stored[r].peak_transient, cast[r].peak_transient) << DTypeName(dt);
      std::printf("%s rank %d: peak transient bytes %lld with fp32 unit gradients, %lld stored two-byte\n",
                  DTypeName(dt), r, static_cast<long long>(cast[r].peak_transient),
                  static_cast<long long>(stored[r].peak_transient));
    }
  }
}

// An fp32 reduce_dtype (the default) keeps the fp32 buffer: GradBufferStoreOnce
// is GradBuffer, and the results are those of a model that never asks.
TEST(FsdpStoreOnce, Fp32ReduceKeepsTheFp32Buffer) {
  const LlamaConfig c = Small();
  const auto hidden = RunRanks(c, 2, DType::kBF16, DType::kF32, true, 0);
  const auto asked = RunRanks(c, 2, DType::kBF16, DType::kF32, false, 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(asked[r].grads, hidden[r].grads);
    EXPECT_EQ(asked[r].peak_transient, hidden[r].peak_transient);
  }
}

}  // namespace
}  // namespace shard
