#include "shard/backend/sim/sim_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <vector>
#include <chrono>
#include <map>
#include <thread>
#include <unordered_map>

namespace shard::sim {
namespace {

// Fake addresses: one PROT_NONE reservation per process, never backed. Freed
// blocks are reused by exact size (a training step frees and allocates the
// same few sizes over and over), so the reservation only has to cover the peak
// plus what size changes strand.
class AddressSpace {
 public:
  static AddressSpace& Get() {
    static AddressSpace* space = new AddressSpace();  // never destroyed: backends may outlive statics
    return *space;
  }

  StatusOr<void*> Take(size_t bytes) {
    const size_t size = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> lock(mu_);
    if (base_ == 0) return ResourceExhausted("simulated memory: could not reserve address space for the simulation");
    uintptr_t at = 0;
    auto it = free_.find(size);
    if (it != free_.end()) {
      at = it->second;
      free_.erase(it);
    } else {
      if (next_ + size > limit_)
        return ResourceExhausted("simulated memory: " + std::to_string(next_ - base_) +
                                 " bytes of fake addresses are in use; the reservation is exhausted");
      at = next_;
      next_ += size;
    }
    sizes_[at] = size;
    return reinterpret_cast<void*>(at);
  }

  void Give(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(reinterpret_cast<uintptr_t>(p));
    if (it == sizes_.end()) return;
    free_.emplace(it->second, it->first);
    sizes_.erase(it);
  }

 private:
  static constexpr size_t kAlign = 4096;
  AddressSpace() {
    // As much as the kernel grants, from 16 TiB down to 256 GiB.
    for (size_t size = size_t{1} << 44; size >= size_t{1} << 38; size >>= 1) {
      void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        base_ = next_ = reinterpret_cast<uintptr_t>(p);
        limit_ = base_ + size;
        return;
      }
    }
  }
  std::mutex mu_;
  uintptr_t base_ = 0, next_ = 0, limit_ = 0;
  std::multimap<size_t, uintptr_t> free_;
  std::unordered_map<uintptr_t, size_t> sizes_;
};

// The FSDP runtime frees a unit's gradient buffers once it finds their
// reduce-scatter finished, which it checks at set points, so the peak depends
// on how far communication has got. The simulation fixes it: a decoder
// block's attention (compute) waits until every collective queued before it
// has run — a network that keeps up with compute, which is what the planner
// assumes — and then a little longer, for the communication thread to record
// the completion. Events the backend records are how it knows: the runtime
// hands each collective the event recorded before it (CommOptions::
// ready_event), and the sim communicator sets that event's flag when the call
// is done (sim_communicator.h); host-side waits (Wait) set it too.
constexpr auto kCompletionSlack = std::chrono::milliseconds(1);
constexpr auto kCommWaitLimit = std::chrono::seconds(10);  // never hang: proceed after this

class SimEvent final : public BackendEvent {
 public:
  void Wait() override { done_.store(1); }
  void* native_handle() const override { return const_cast<std::atomic<int>*>(&done_); }
  bool done() const { return done_.load() != 0; }

 private:
  std::atomic<int> done_{0};
};

// The CUDA backend's own device buffers (cuda_backend.cc, cuda_gemm.cc),
// which no caller sees: the cuBLASLt workspace, the GEMM input casts (two
// grow-only buffers, A and B), the rounded q/k/v copy for two-byte attention
// and the attention backward's row statistics. The simulation keeps them the
// same way, so its device peak is the one the GPU would see.
constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

class SimBackend final : public Backend {
 public:
  SimBackend(std::shared_ptr<MemoryTracker> tracker, bool native_bf16)
      : tracker_(std::move(tracker)), native_bf16_(native_bf16) {
    if (tracker_) tracker_->Allocated(false, kGemmWorkspaceBytes);
  }
  ~SimBackend() override {
    if (tracker_) {
      tracker_->Freed(false, kGemmWorkspaceBytes);
      for (int64_t* g : {&gemm_a_, &gemm_b_, &rounded_qkv_, &delta_})
        if (*g > 0) tracker_->Freed(false, *g);
    }
    // Anything still allocated goes back with the backend (buffers that outlive
    // it would be a bug in the caller, as on a real device).
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, a] : live_) {
      AddressSpace::Get().Give(p);
      if (tracker_) tracker_->Freed(a.host, a.bytes);
    }
  }
  const char* name() const override { return "sim"; }
  bool native_bf16() const override { return native_bf16_; }
  bool holds_data() const override { return false; }

  StatusOr<void*> Allocate(size_t bytes) override { return Take(bytes, false); }
  void Free(void* ptr) override { Give(ptr); }
  StatusOr<void*> AllocateHost(size_t bytes) override { return Take(bytes, true); }
  void FreeHost(void* ptr) override { Give(ptr); }
  std::shared_ptr<BackendEvent> RecordEvent() override {
    auto e = std::make_shared<SimEvent>();
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    return e;
  }
  void CopyToDevice(void*, const void*, size_t) override {}
  void CopyToHost(void*, const void*, size_t) override {}
  void Copy(void*, const void*, size_t) override {}
  void Fill(float*, int64_t, float) override {}
  void CastFromF32(const float*, void*, int64_t, DType) override {}
  void CastToF32(const void*, float*, int64_t, DType) override {}
  void DequantizeNf4(const Nf4Run&, float*, DType, DType) override {}
  void Synchronize() override {}
  void Gemm(const GemmArgs& g) override {
    if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
    // LtGemm::Prepare: each operand cast whole, keeping its leading dimension;
    // a B stored in the type the tensor cores take is used as it is.
    const bool emulated = g.compute == DType::kBF16 && !native_bf16_;
    const int64_t elem = emulated ? 4 : static_cast<int64_t>(DTypeSize(g.compute));
    const int64_t span_a = ((g.trans_a ? g.k : g.m) - 1) * g.lda + (g.trans_a ? g.m : g.k);
    const int64_t span_b = ((g.trans_b ? g.n : g.k) - 1) * g.ldb + (g.trans_b ? g.k : g.n);
    if (g.compute != DType::kF32) Grow(&gemm_a_, span_a * elem);
    if (g.b_dtype == DType::kF32) {
      if (g.compute != DType::kF32) Grow(&gemm_b_, span_b * elem);
    } else if (g.b_dtype != g.compute || emulated) {
      Grow(&gemm_b_, span_b * 4);  // widened to fp32 first
    }
  }
  void Add(const float*, const float*, float*, int64_t) override {}
  void Scale(float*, int64_t, float) override {}
  double SumSquares(const float*, int64_t) override { return 0.0; }
  void EmbeddingForward(const int32_t*, int64_t, const float*, DType, int, float*) override {
    Op("EmbeddingForward");
  }
  void EmbeddingBackward(const int32_t*, int64_t, const float*, int, float*) override { Op("EmbeddingBackward"); }
  void RmsNormForward(const float*, const float*, int64_t, int, float, float*, float*) override {}
  void RmsNormBackward(const float*, const float*, const float*, const float*, int64_t, int, float*,
                       float*) override {}
  void Rope(float*, int64_t, int64_t, int, int, const int32_t*, const float*, bool) override {}
  void AttentionForward(const AttentionShape& shape, const float*, const int32_t*, float*, float*) override {
    Op("AttentionForward");
    RoundedQkv(shape);
    AwaitCollectives();
  }
  void AttentionBackward(const AttentionShape& shape, const float*, const int32_t*, const float*, const float*,
                         const float*, float*) override {
    Op("AttentionBackward");
    Grow(&delta_, 4 * std::max<int64_t>(1, shape.batch * shape.seq * shape.n_heads));
    RoundedQkv(shape);
    AwaitCollectives();
  }
  // Context parallelism's chunk attention (CpAttention calls it for a rank's
  // head and tail chunks): the same scratch as the CPU backend's, over the
  // chunk's queries and the whole sequence's K/V.
  Status AttentionChunkForward(const AttentionShape& shape, const AttentionChunk& c, const float*, const float*,
                               const int32_t*, float*, float*) override {
    Op("AttentionChunkForward");
    RoundedChunk(shape, c);
    AwaitCollectives();
    return OkStatus();
  }
  Status AttentionChunkBackward(const AttentionShape& shape, const AttentionChunk& c, const float*, const float*,
                                const int32_t*, const float*, const float*, const float*, float*, float*) override {
    Op("AttentionChunkBackward");
    Grow(&delta_, 4 * std::max<int64_t>(1, shape.batch * c.q_len * shape.n_heads));
    RoundedChunk(shape, c);
    AwaitCollectives();
    return OkStatus();
  }
  void SwiGluForward(const float*, int64_t, int, float*) override {}
  void SwiGluBackward(const float*, const float*, int64_t, int, float*) override {}
  double CrossEntropy(float*, const int32_t*, int64_t, int, float, bool) override {
    Op("CrossEntropy");
    return 0.0;
  }
  void AdamW(float*, const float*, float*, float*, int64_t, const AdamWArgs&) override { Op("AdamW"); }
  // Mixture of experts: shapes only, like every op here. The routing is not
  // computed, so MoeMlp prices the worst case itself (holds_data() false).
  Status MoeRoute(const float*, const MoeRouting&) override { Op("MoeRoute"); return OkStatus(); }
  Status MoeRouteBackward(const MoeRouting&, const float*, const float*, float*) override {
    Op("MoeRouteBackward");
    return OkStatus();
  }
  Status MoePermute(const float*, const int32_t*, int64_t, int, int64_t, float*) override { return OkStatus(); }
  Status MoeUnpermute(const float*, const int32_t*, const float*, int64_t, int, int64_t, float*) override {
    return OkStatus();
  }
  Status MoeUnpermuteBackward(const float*, const float*, const int32_t*, const float*, int64_t, int, int64_t, float*,
                              float*) override {
    return OkStatus();
  }
  void Dropout(const float*, float*, int64_t, float, uint64_t) override {}  // a kernel: no memory

 private:
  struct Alloc {
    bool host;
    int64_t bytes;
  };
  void Op(const char* name) {
    if (tracker_) tracker_->Op(name);
  }
  // A grow-only internal buffer (the CUDA backend's Scratch::Get).
  void Grow(int64_t* held, int64_t bytes) {
    if (bytes <= *held) return;
    if (tracker_) {
      if (*held > 0) tracker_->Freed(false, *held);
      tracker_->Allocated(false, bytes);
    }
    *held = bytes;
  }
  // See kCompletionSlack.
  void AwaitCollectives() {
    const auto deadline = std::chrono::steady_clock::now() + kCommWaitLimit;
    for (;;) {
      bool pending = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::erase_if(events_, [](const std::weak_ptr<SimEvent>& w) {
          auto e = w.lock();
          return !e || e->done();
        });
        pending = !events_.empty();
      }
      if (!pending || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::this_thread::sleep_for(kCompletionSlack);
  }
  void RoundedQkv(const AttentionShape& shape) {
    if (shape.compute != DType::kF32)
      Grow(&rounded_qkv_, 4 * std::max<int64_t>(1, shape.batch * shape.seq * shape.qkv_stride()));
  }
  // A chunk's q and the whole K/V rounded (the CUDA backend's two copies).
  void RoundedChunk(const AttentionShape& shape, const AttentionChunk& c) {
    if (shape.compute == DType::kF32) return;
    const int64_t kv = shape.batch * shape.seq * 2 * static_cast<int64_t>(shape.n_kv_heads) * shape.head_dim;
    Grow(&rounded_qkv_, 4 * std::max<int64_t>(1, kv + shape.batch * c.q_len * shape.out_stride()));
  }
  StatusOr<void*> Take(size_t bytes, bool host) {
    ASSIGN_OR_RETURN(void* p, AddressSpace::Get().Take(bytes));
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = {host, static_cast<int64_t>(bytes)};
    }
    if (tracker_) tracker_->Allocated(host, static_cast<int64_t>(bytes));
    return p;
  }
  void Give(void* p) {
    if (!p) return;
    Alloc a{};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      if (it == live_.end()) return;
      a = it->second;
      live_.erase(it);
    }
    AddressSpace::Get().Give(p);
    if (tracker_) tracker_->Freed(a.host, a.bytes);
  }

  std::shared_ptr<MemoryTracker> tracker_;
  bool native_bf16_;
  int64_t gemm_a_ = 0, gemm_b_ = 0, rounded_qkv_ = 0, delta_ = 0;  // bytes of the internal buffers
  std::vector<std::weak_ptr<SimEvent>> events_;  // recorded, not yet done (guarded by mu_)
  std::mutex mu_;  // live_: frees may come from the runtime's worker threads
  std::unordered_map<void*, Alloc> live_;
};

}  // namespace

void MemoryTracker::SetPhase(const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = phase;
  micro_batch_ = fwd_attn_ = bwd_attn_ = chunk_ops_ = 0;
  backward_ = false;
  context_.clear();
  last_op_.clear();
}

void MemoryTracker::SetLayers(int layers) {
  std::lock_guard<std::mutex> lock(mu_);
  layers_ = layers;
}

void MemoryTracker::Op(const char* name) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string op = name;
  last_op_ = op;
  const int L = std::max(1, layers_);
  if (op == "EmbeddingForward") {
    ++micro_batch_;
    fwd_attn_ = bwd_attn_ = chunk_ops_ = 0;
    backward_ = false;
    context_ = "forward, embedding";
  } else if (op == "AttentionChunkForward" || op == "AttentionChunkBackward") {
    // Context parallelism: a layer's head and tail chunks are one block's attention.
    if (chunk_ops_++ % 2 == 0) {
      const bool fwd = op == "AttentionChunkForward";
      context_ = !fwd ? "backward, block " + std::to_string(L - 1 - bwd_attn_++ % L)
                 : backward_ ? "backward, recompute of block " + std::to_string(L - 1 - bwd_attn_ % L)
                             : "forward, block " + std::to_string(fwd_attn_++ % L);
    }
  } else if (op == "AttentionForward") {
    // After the first backward op, a forward attention is a checkpointed
    // block's recompute (of the block whose backward comes next).
    context_ = backward_ ? "backward, recompute of block " + std::to_string(L - 1 - bwd_attn_ % L)
                         : "forward, block " + std::to_string(fwd_attn_++ % L);
  } else if (op == "CrossEntropy") {
    backward_ = true;
    context_ = "LM head and loss";
  } else if (op == "AttentionBackward") {
    context_ = "backward, block " + std::to_string(L - 1 - bwd_attn_++ % L);
  } else if (op == "EmbeddingBackward") {
    context_ = "backward, embedding";
  } else if (op == "AdamW") {
    context_ = "optimizer step";
  }
}

std::string MemoryTracker::WhereLocked() const {
  std::string w = phase_;
  if (micro_batch_ > 0 && context_ != "optimizer step") w += ", micro-batch " + std::to_string(micro_batch_);
  if (!context_.empty()) w += ", " + context_;
  if (!last_op_.empty()) w += " (after " + last_op_ + ")";
  return w;
}

void MemoryTracker::Allocated(bool host, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++live_;
  int64_t& now = host ? host_now_ : device_now_;
  Peak& peak = host ? host_peak_ : device_peak_;
  std::map<int64_t, int>& live = host ? host_live_ : device_live_;
  now += bytes;
  ++live[bytes];
  if (now > peak.bytes) peak = {now, WhereLocked(), live};
}

void MemoryTracker::Freed(bool host, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  --live_;
  (host ? host_now_ : device_now_) -= bytes;
  std::map<int64_t, int>& live = host ? host_live_ : device_live_;
  auto it = live.find(bytes);
  if (it != live.end() && --it->second == 0) live.erase(it);
}

Peak MemoryTracker::device_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_peak_;
}
Peak MemoryTracker::host_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_peak_;
}
int64_t MemoryTracker::device_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_now_;
}
int64_t MemoryTracker::host_now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_now_;
}
int64_t MemoryTracker::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

std::unique_ptr<Backend> CreateSimBackend(std::shared_ptr<MemoryTracker> tracker, bool native_bf16) {
  return std::make_unique<SimBackend>(std::move(tracker), native_bf16);
}

}  // namespace shard::sim
