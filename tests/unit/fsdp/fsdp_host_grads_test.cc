// Gradients kept in host memory (optimizer offload) flow down off the compute
// thread: asynchronous copies into a ring of staging buffers, added into the
// host shards by the runtime's host worker. Ranks as threads (local
// communicator), several micro-batches and steps, more units than stages.
//
// The device backend here is the CPU backend behind a wrapper that makes
// CopyToHostAsync really asynchronous: the bytes are taken when the copy is
// queued (what stream order gives a GPU) but land in host memory only when an
// event recorded after it is waited on, after a delay. Reading a stage or a
// host shard before its event, or reusing a stage too early, then shows up as
// wrong sums; the delay makes the two-stage ring fill, so the compute thread
// has to block. A second wrapper on the host backend counts overlapping calls
// (the runtime must never use it from two threads at once).
//
// Asserted: the host gradients equal the on-device runtime's bitwise after
// every step (W = 1; W = 2 full_shard, fp32 and bf16 reduce-scatter; W = 2
// no_shard with its replica all-reduce on the host shards), the ring blocked,
// no event was waited on by the compute thread, the host backend never
// overlapped; and through OptimizerState, parameters after several steps equal
// the on-device ones bitwise.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "shard/fsdp/fsdp_runtime.h"
#include "shard/spec/param_layout.h"
#include "shard/spec/optim_config.h"
#include "shard/train/optimizer_state.h"

namespace shard {
namespace {

// More units than FsdpRuntime::kHostStages, uneven sizes, one tiny.
const std::vector<int64_t> kNumels = {1000, 7, 4097, 301, 2050, 513};
constexpr int kSteps = 3;
constexpr int kMicroBatches = 3;

// Magnitudes over several binades, so a different summation order changes bits.
float Grad(int rank, int step, int mb, int u, int64_t i) {
  return std::sin(0.13f * static_cast<float>(i) + 0.7f * static_cast<float>(rank + 3 * step + 11 * mb + 5 * u)) *
         std::ldexp(1.0f, static_cast<int>((i + mb + rank) % 7) - 3);
}

std::unique_ptr<Backend> Cpu() {
  auto b = CreateBackend("cpu");
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(*b);
}

// Every call goes to `inner`; each counts as a use of this backend, and a use
// that starts while another is running is an overlap.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  int overlaps() const { return overlaps_.load(); }

 protected:
  // Defined before its users: they deduce its return type.
  template <typename F>
  auto Use(F&& f) {
    struct Guard {
      ForwardingBackend* b;
      explicit Guard(ForwardingBackend* x) : b(x) {
        if (b->users_.fetch_add(1) != 0) b->overlaps_.fetch_add(1);
      }
      ~Guard() { b->users_.fetch_sub(1); }
    } g(this);
    return f();
  }

 public:

  const char* name() const override { return inner_->name(); }
  StatusOr<void*> Allocate(size_t b) override { return Use([&] { return inner_->Allocate(b); }); }
  void Free(void* p) override { Use([&] { inner_->Free(p); }); }
  StatusOr<void*> AllocateHost(size_t b) override { return Use([&] { return inner_->AllocateHost(b); }); }
  void FreeHost(void* p) override { Use([&] { inner_->FreeHost(p); }); }
  void CopyToDevice(void* d, const void* s, size_t b) override { Use([&] { inner_->CopyToDevice(d, s, b); }); }
  void CopyToHost(void* d, const void* s, size_t b) override { Use([&] { inner_->CopyToHost(d, s, b); }); }
  void Copy(void* d, const void* s, size_t b) override { Use([&] { inner_->Copy(d, s, b); }); }
  void Fill(float* x, int64_t n, float v) override { Use([&] { inner_->Fill(x, n, v); }); }
  void CastFromF32(const float* s, void* d, int64_t n, DType t) override {
    Use([&] { inner_->CastFromF32(s, d, n, t); });
  }
  void CastToF32(const void* s, float* d, int64_t n, DType t) override { Use([&] { inner_->CastToF32(s, d, n, t); }); }
  void Synchronize() override { Use([&] { inner_->Synchronize(); }); }
  void Gemm(const GemmArgs& a) override { Use([&] { inner_->Gemm(a); }); }
  void Add(const float* a, const float* b, float* o, int64_t n) override { Use([&] { inner_->Add(a, b, o, n); }); }
  void Scale(float* x, int64_t n, float s) override { Use([&] { inner_->Scale(x, n, s); }); }
  double SumSquares(const float* x, int64_t n) override { return Use([&] { return inner_->SumSquares(x, n); }); }
  void EmbeddingForward(const int32_t* t, int64_t r, const float* tab, DType dt, int d, float* o) override {
    Use([&] { inner_->EmbeddingForward(t, r, tab, dt, d, o); });
  }
  void EmbeddingBackward(const int32_t* t, int64_t r, const float* dout, int d, float* dt) override {
    Use([&] { inner_->EmbeddingBackward(t, r, dout, d, dt); });
  }
  void RmsNormForward(const float* x, const float* w, int64_t r, int d, float e, float* y, float* rs) override {
    Use([&] { inner_->RmsNormForward(x, w, r, d, e, y, rs); });
  }
  void RmsNormBackward(const float* dy, const float* x, const float* w, const float* rs, int64_t r, int d, float* dx,
                       float* dw) override {
    Use([&] { inner_->RmsNormBackward(dy, x, w, rs, r, d, dx, dw); });
  }
  void Rope(float* x, int64_t r, int64_t st, int h, int hd, const int32_t* p, const float* cs, bool inv) override {
    Use([&] { inner_->Rope(x, r, st, h, hd, p, cs, inv); });
  }
  void AttentionForward(const AttentionShape& s, const float* qkv, const int32_t* seg, float* o, float* l) override {
    Use([&] { inner_->AttentionForward(s, qkv, seg, o, l); });
  }
  void AttentionBackward(const AttentionShape& s, const float* qkv, const int32_t* seg, const float* o, const float* l,
                         const float* dout, float* dqkv) override {
    Use([&] { inner_->AttentionBackward(s, qkv, seg, o, l, dout, dqkv); });
  }
  void SwiGluForward(const float* gu, int64_t r, int f, float* h) override {
    Use([&] { inner_->SwiGluForward(gu, r, f, h); });
  }
  void SwiGluBackward(const float* dh, const float* gu, int64_t r, int f, float* dgu) override {
    Use([&] { inner_->SwiGluBackward(dh, gu, r, f, dgu); });
  }
  double CrossEntropy(float* lg, const int32_t* t, int64_t r, int v, float s, bool g) override {
    return Use([&] { return inner_->CrossEntropy(lg, t, r, v, s, g); });
  }
  void AdamW(float* p, const float* g, float* m, float* v, int64_t n, const AdamWArgs& a) override {
    Use([&] { inner_->AdamW(p, g, m, v, n, a); });
  }

 protected:

  std::unique_ptr<Backend> inner_;
  std::atomic<int> users_{0}, overlaps_{0};
};

// A copy queued by CopyToHostAsync: the source bytes as of queueing, landing
// in `dst` once (whoever applies it first: an event's Wait or a synchronous call).
struct PendingCopy {
  std::mutex mu;
  bool done = false;
  void* dst = nullptr;
  std::vector<char> bytes;
  void Apply() {
    std::lock_guard<std::mutex> l(mu);
    if (done) return;
    std::memcpy(dst, bytes.data(), bytes.size());
    done = true;
  }
};

class DeferredEvent final : public BackendEvent {
 public:
  DeferredEvent(std::vector<std::shared_ptr<PendingCopy>> copies, std::thread::id compute,
                std::atomic<int>* waits_on_compute)
      : copies_(std::move(copies)), compute_(compute), waits_on_compute_(waits_on_compute) {}
  void Wait() override {
    if (std::this_thread::get_id() == compute_) waits_on_compute_->fetch_add(1);
    if (!copies_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow bus
    for (auto& c : copies_) c->Apply();
  }

 private:
  std::vector<std::shared_ptr<PendingCopy>> copies_;
  std::thread::id compute_;
  std::atomic<int>* waits_on_compute_;
};

// The "device": the CPU backend with really asynchronous copies to the host.
// Created on, and used from, one compute thread (events from any thread).
class DeferredCopyBackend final : public ForwardingBackend {
 public:
  DeferredCopyBackend() : ForwardingBackend(Cpu()), compute_(std::this_thread::get_id()) {}
  int waits_on_compute_thread() const { return waits_on_compute_.load(); }

  void CopyToHostAsync(void* dst, const void* src, size_t bytes) override {
    auto c = std::make_shared<PendingCopy>();
    c->dst = dst;
    c->bytes.assign(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    std::lock_guard<std::mutex> l(mu_);
    unrecorded_.push_back(c);
    queued_.push_back(std::move(c));
  }
  std::shared_ptr<BackendEvent> RecordEvent() override {
    std::lock_guard<std::mutex> l(mu_);
    auto e = std::make_shared<DeferredEvent>(std::move(unrecorded_), compute_, &waits_on_compute_);
    unrecorded_.clear();
    return e;
  }
  // Synchronous transfers and Synchronize wait for all queued work, the
  // pending copies included (stream order).
  void CopyToHost(void* d, const void* s, size_t b) override {
    Flush();
    ForwardingBackend::CopyToHost(d, s, b);
  }
  void CopyToDevice(void* d, const void* s, size_t b) override {
    Flush();
    ForwardingBackend::CopyToDevice(d, s, b);
  }
  void Synchronize() override { Flush(); }

 private:
  void Flush() {
    std::vector<std::shared_ptr<PendingCopy>> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      all.swap(queued_);
      unrecorded_.clear();
    }
    for (auto& c : all) c->Apply();
  }

  std::thread::id compute_;
  std::mutex mu_;
  std::vector<std::shared_ptr<PendingCopy>> queued_;      // every copy not yet flushed (guarded by mu_)
  std::vector<std::shared_ptr<PendingCopy>> unrecorded_;  // queued since the last RecordEvent (guarded by mu_)
  std::atomic<int> waits_on_compute_{0};
};

struct Case {
  int world = 1;
  ShardStrategy strategy = ShardStrategy::kFullShard;
  DType reduce_dtype = DType::kF32;
};

struct RankView {
  std::vector<std::vector<std::vector<float>>> grads;  // [step][unit] this rank's reduced shard
  std::vector<std::vector<float>> params;              // [unit] after the last step (optimizer runs only)
  int64_t stalls = 0;
  int waits_on_compute = 0;
  int host_overlaps = 0;
};

// Communicators for one rank: a shard group and a replica group as the strategy needs.
void MakeComms(const Case& s, int rank, const std::string& prefix, std::unique_ptr<Communicator>* shard,
               std::unique_ptr<Communicator>* replicate) {
  if (s.world == 1) return;
  CommConfig cc;
  cc.backend = "local";
  cc.rank = rank;
  cc.world_size = s.world;
  cc.prefix = prefix;
  auto c = CreateCommunicator(cc);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  (s.strategy == ShardStrategy::kNoShard ? *replicate : *shard) = std::move(*c);
}

// One step of kMicroBatches micro-batches through UnitAccess as a model would
// drive it (forward acquires, backward accumulates into GradBuffer).
void RunStep(FsdpRuntime& rt, Backend& be, int rank, int step) {
  rt.ZeroGrads();
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    rt.BeginMicroBatch();
    for (int u = 0; u < rt.num_units(); ++u) {
      ASSERT_TRUE(rt.AcquireParams(u).ok());
      ASSERT_TRUE(rt.ReleaseParams(u).ok());
    }
    for (int u = rt.num_units() - 1; u >= 0; --u) {
      ASSERT_TRUE(rt.AcquireParams(u).ok());
      auto g = rt.GradBuffer(u);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      const int64_t n = rt.layout(u).numel;
      std::vector<float> c(n);
      for (int64_t i = 0; i < n; ++i) c[i] = Grad(rank, step, mb, u, i);
      auto tmp = DeviceBuffer::Create(&be, n);
      ASSERT_TRUE(tmp.ok());
      be.CopyToDevice(tmp->data(), c.data(), n * sizeof(float));
      be.Add(*g, tmp->data(), *g, n);  // the model accumulates
      ASSERT_TRUE(rt.GradsDone(u).ok());
      ASSERT_TRUE(rt.ReleaseParams(u).ok());
    }
    ASSERT_TRUE(rt.FinishMicroBatch().ok());
  }
  ASSERT_TRUE(rt.FinishGradients().ok());
}

std::vector<std::vector<float>> ReadGrads(FsdpRuntime& rt, Backend& be) {
  std::vector<std::vector<float>> out;
  for (int u = 0; u < rt.num_units(); ++u) {
    std::vector<float> g(rt.layout(u).shard_numel);
    if (rt.grads_on_host()) {
      std::copy(rt.host_grad_shard(u), rt.host_grad_shard(u) + g.size(), g.begin());
    } else {
      be.CopyToHost(g.data(), rt.grad_shard(u), g.size() * sizeof(float));
    }
    out.push_back(std::move(g));
  }
  return out;
}

FsdpOptions Options(const Case& s, bool host_grads) {
  FsdpOptions o;
  o.strategy = s.strategy;
  o.reduce_dtype = s.reduce_dtype;
  o.grads_on_device = !host_grads;
  return o;
}

// The runtime alone, host shards attached by hand (host backend wrapped to
// catch overlapping use). Returns every rank's view.
std::vector<RankView> RunGradients(const Case& s, bool host_grads) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-hg-" + std::to_string(group++) + "/";
  std::vector<RankView> views(s.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < s.world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Backend> be;
      DeferredCopyBackend* deferred = nullptr;
      if (host_grads) {
        auto d = std::make_unique<DeferredCopyBackend>();
        deferred = d.get();
        be = std::move(d);
      } else {
        be = Cpu();
      }
      // The host backend and shards outlive the runtime (declared first).
      ForwardingBackend host(Cpu());
      std::vector<HostBuffer> shards;
      std::unique_ptr<Communicator> shard, replicate;
      MakeComms(s, r, prefix, &shard, &replicate);
      auto rt = FsdpRuntime::Create(be.get(), kNumels, Options(s, host_grads), std::move(shard), std::move(replicate));
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      if (host_grads) {
        std::vector<float*> ptrs;
        for (int u = 0; u < (*rt)->num_units(); ++u) {
          auto b = HostBuffer::Create(be.get(), (*rt)->layout(u).shard_numel);
          ASSERT_TRUE(b.ok());
          std::fill_n(b->data(), b->size(), 0.0f);
          ptrs.push_back(b->data());
          shards.push_back(std::move(*b));
        }
        ASSERT_TRUE((*rt)->AttachHostGrads(&host, ptrs).ok());
        int64_t largest = 0;
        for (int u = 0; u < (*rt)->num_units(); ++u) largest = std::max(largest, (*rt)->layout(u).shard_numel);
        EXPECT_EQ((*rt)->host_stage_bytes(), FsdpRuntime::kHostStages * largest * 4);
      }
      RankView& v = views[r];
      for (int step = 0; step < kSteps; ++step) {
        RunStep(**rt, *be, r, step);
        v.grads.push_back(ReadGrads(**rt, *be));
      }
      v.stalls = (*rt)->host_stage_stalls();
      if (deferred) v.waits_on_compute = deferred->waits_on_compute_thread();
      v.host_overlaps = host.overlaps();
    });
  }
  for (auto& t : threads) t.join();
  return views;
}

void ExpectBitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " element " << i;
}

class FsdpHostGradsTest : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpHostGradsTest, HostGradientsAreBitwiseTheDeviceOnesAndTheComputeThreadNeverWaitsOnACopy) {
  const Case s = GetParam();
  const std::vector<RankView> dev = RunGradients(s, false), host = RunGradients(s, true);
  ASSERT_EQ(dev.size(), host.size());
  for (int r = 0; r < s.world; ++r) {
    ASSERT_EQ(host[r].grads.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step)
      for (size_t u = 0; u < kNumels.size(); ++u)
        ExpectBitwise(host[r].grads[step][u], dev[r].grads[step][u],
                      "rank " + std::to_string(r) + " step " + std::to_string(step) + " unit " + std::to_string(u));
    EXPECT_EQ(host[r].waits_on_compute, 0) << "rank " << r << ": the compute thread waited for a copy itself";
    EXPECT_EQ(host[r].host_overlaps, 0) << "rank " << r << ": the host backend was used by two threads at once";
    // Sharded units go through the two stages: six units folded per
    // micro-batch with a 2 ms copy each must find both stages busy.
    if (s.world > 1 && s.strategy != ShardStrategy::kNoShard) {
      EXPECT_GT(host[r].stalls, 0) << "rank " << r << ": the staging ring never filled";
    }
    std::printf("rank %d: %lld waits for a free stage\n", r, static_cast<long long>(host[r].stalls));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, FsdpHostGradsTest,
    ::testing::Values(Case{1, ShardStrategy::kFullShard, DType::kF32}, Case{2, ShardStrategy::kFullShard, DType::kF32},
                      Case{2, ShardStrategy::kFullShard, DType::kBF16}, Case{2, ShardStrategy::kNoShard, DType::kF32}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.strategy == ShardStrategy::kNoShard ? "no_shard" : "full_shard") + "_W" +
             std::to_string(i.param.world) + (i.param.reduce_dtype == DType::kF32 ? "" : "_bf16_reduce");
    });

// One fp32 tensor per unit, decayed, matching kNumels.
ParamLayout Layout() {
  ParamLayout l;
  for (size_t u = 0; u < kNumels.size(); ++u) {
    UnitSpec us;
    us.name = "u" + std::to_string(u);
    TensorSpec t;
    t.hf_name = us.name + ".w";
    t.offset = 0;
    t.numel = kNumels[u];
    t.decay = true;
    us.tensors = {t};
    us.numel = t.numel;
    l.units.push_back(us);
  }
  return l;
}

// Through OptimizerState (its own host backend and shards, the runtime's ring):
// parameters after kSteps offloaded AdamW steps equal the on-device ones.
std::vector<RankView> RunOptimizer(const Case& s, bool offload) {
  static std::atomic<int> group{0};
  const std::string prefix = "fsdp-hg-opt-" + std::to_string(group++) + "/";
  const ParamLayout layout = Layout();
  std::vector<RankView> views(s.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < s.world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Backend> be;
      if (offload) {
        be = std::make_unique<DeferredCopyBackend>();
      } else {
        be = Cpu();
      }
      std::unique_ptr<Communicator> shard, replicate;
      MakeComms(s, r, prefix, &shard, &replicate);
      FsdpOptions o = Options(s, offload);
      o.moments_on_device = !offload;
      auto rt = FsdpRuntime::Create(be.get(), kNumels, o, std::move(shard), std::move(replicate));
      ASSERT_TRUE(rt.ok()) << rt.status().ToString();
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        const ShardLayout& l = (*rt)->layout(u);
        std::vector<float> p(l.shard_numel);
        for (int64_t j = 0; j < l.shard_numel; ++j) p[j] = 0.01f * std::cos(static_cast<float>(l.begin(r) + j + u));
        be->CopyToDevice((*rt)->param_shard(u), p.data(), p.size() * sizeof(float));
      }
      auto st = OptimizerState::Create(be.get(), rt->get(), offload);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      OptimConfig c;
      c.weight_decay = 0.1;
      RankView& v = views[r];
      for (int step = 0; step < kSteps; ++step) {
        RunStep(**rt, *be, r, step);
        ASSERT_TRUE((*st)->Step(layout, c, 1e-3f, step + 1, step == 1 ? 0.5f : 1.0f).ok());
      }
      for (int u = 0; u < (*rt)->num_units(); ++u) {
        const int64_t n = (*rt)->layout(u).shard_numel;
        std::vector<float> p(n), m(n), w(n);
        (*st)->ReadShard(u, n, p.data(), m.data(), w.data());
        v.params.push_back(std::move(p));
      }
      v.stalls = (*rt)->host_stage_stalls();
      st->reset();
      rt->reset();
    });
  }
  for (auto& t : threads) t.join();
  return views;
}

TEST(FsdpHostGradsOptimizerTest, OffloadedParametersAreBitwiseTheDeviceOnesAtW1AndW2) {
  for (const Case s : {Case{1, ShardStrategy::kFullShard, DType::kF32}, Case{2, ShardStrategy::kFullShard, DType::kF32},
                        Case{2, ShardStrategy::kNoShard, DType::kF32}}) {
    SCOPED_TRACE("W=" + std::to_string(s.world) + (s.strategy == ShardStrategy::kNoShard ? " no_shard" : " full_shard"));
    const std::vector<RankView> dev = RunOptimizer(s, false), off = RunOptimizer(s, true);
    for (int r = 0; r < s.world; ++r)
      for (size_t u = 0; u < kNumels.size(); ++u)
        ExpectBitwise(off[r].params[u], dev[r].params[u], "rank " + std::to_string(r) + " unit " + std::to_string(u));
  }
}

}  // namespace
}  // namespace shard
