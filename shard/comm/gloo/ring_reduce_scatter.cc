#include "shard/comm/gloo/ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "shard/comm/collective_util.h"
#include "shard/comm/gloo/abortable_buffers.h"

namespace shard::comm {
namespace {

using Clock = std::chrono::steady_clock;
using ::gloo::transport::UnboundBuffer;

// Slot prefix for shardd's own collectives; Gloo's use 0x01..0x08.
constexpr uint8_t kSlotPrefix = 0x53;
// 1 MiB segments: big enough that per-message overhead vanishes, small enough that
// reducing one overlaps the transfer of the next.
constexpr size_t kSegmentBytes = 1 << 20;

int Mod(int a, int w) { return ((a % w) + w) % w; }

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

struct WaitAborted : std::runtime_error {
  WaitAborted() : std::runtime_error("wait aborted by Abort()") {}
};

// Where block b lies in the input and how it is cut into segments.
struct RingGeometry {
  size_t total, block, seg;
  size_t off(int b) const { return std::min(static_cast<size_t>(b) * block, total); }
  size_t len(int b) const { return std::min(total, off(b) + block) - off(b); }
  size_t nseg(int b) const { return (len(b) + seg - 1) / seg; }
  size_t seg_len(int b, size_t k) const { return std::min(seg, len(b) - k * seg); }
};

// One call's ring: the input and the two halves of `scratch` (partial sums
// received, one step's while the other's are sent on) as unbound buffers, one
// per segment, each registered with `abortable`. Run throws what the header says.
template <typename T>
class Ring {
 public:
  Ring(const std::shared_ptr<::gloo::Context>& context, const T* send, T* out, ReduceOp op,
       const RingGeometry& g, Clock::time_point deadline, std::vector<std::byte>& scratch,
       AbortableBuffers& abortable)
      : send_(send), out_(out), op_(op), g_(g), deadline_(deadline), world_(context->size),
        rank_(context->rank), right_((rank_ + 1) % world_), left_((rank_ + world_ - 1) % world_) {
    if (scratch.size() < 2 * g.block * sizeof(T)) scratch.resize(2 * g.block * sizeof(T));
    partial_[0] = reinterpret_cast<T*>(scratch.data());
    partial_[1] = partial_[0] + g.block;
    // Buffers first, their trackers after them, so trackers are destroyed first.
    input_ = context->createUnboundBuffer(const_cast<T*>(send), g.total * sizeof(T));
    const size_t max_segs = (g.block + g.seg - 1) / g.seg;
    for (int p = 0; p < 2; ++p) {
      for (size_t k = 0; k < max_segs; ++k) {
        const size_t n = std::min(g.seg, g.block - k * g.seg);
        bufs_[p].push_back(context->createUnboundBuffer(partial_[p] + k * g.seg, n * sizeof(T)));
      }
    }
    tracks_.push_back(std::make_unique<ScopedTrack>(abortable, input_.get()));
    for (auto& side : bufs_) {
      for (auto& b : side) tracks_.push_back(std::make_unique<ScopedTrack>(abortable, b.get()));
    }
  }

  void Run() {
    try {
      Start();
      for (step_ = 0; step_ < world_ - 1; ++step_) Step(step_);
    } catch (const WaitAborted&) {
      throw;
    } catch (const std::exception& e) {
      throw ::gloo::IoException(std::string(e.what()) + " [ring reduce-scatter step " +
                                std::to_string(step_ + 1) + "/" + std::to_string(world_ - 1) +
                                ", " + doing_ + " rank " + std::to_string(peer_) + "]");
    }
  }

 private:
  int block_in(int s) const { return Mod(rank_ - s - 2, world_); }  // received in step s
  int first_out() const { return Mod(rank_ - 1, world_); }

  void WaitSend(UnboundBuffer* b) {
    peer_ = right_;
    doing_ = "sending to";
    if (!b->waitSend(Remaining(deadline_))) throw WaitAborted();
  }
  void WaitRecv(UnboundBuffer* b) {
    peer_ = left_;
    doing_ = "receiving from";
    if (!b->waitRecv(Remaining(deadline_))) throw WaitAborted();
  }

  // Step 0's receives posted, then our own copy of block rank-1 sent.
  void Start() {
    const int first_in = block_in(0);
    for (size_t k = 0; k < g_.nseg(first_in); ++k) {
      bufs_[0][k]->recv(left_, slot_, 0, g_.seg_len(first_in, k) * sizeof(T));
    }
    peer_ = right_;
    doing_ = "sending to";
    for (size_t k = 0; k < g_.nseg(first_out()); ++k) {
      input_->send(right_, slot_, (g_.off(first_out()) + k * g_.seg) * sizeof(T),
                   g_.seg_len(first_out(), k) * sizeof(T));
    }
  }

  void Step(int step) {
    const int cur = step & 1;
    const int nxt = cur ^ 1;
    const bool last = step == world_ - 2;
    const int b_in = block_in(step);
    // This step sends the block received last step (the input in step 0).
    const size_t n_send = g_.nseg(step == 0 ? first_out() : block_in(step - 1));
    const size_t n_in = g_.nseg(b_in);
    const size_t n_next = last ? 0 : g_.nseg(block_in(step + 1));
    for (size_t k = 0; k < std::max({n_send, n_in, n_next}); ++k) {
      // This step's send of segment k went out of bufs[nxt][k] (or the input); it must
      // finish before that buffer receives the next step's segment.
      if (k < n_send) WaitSend(step == 0 ? input_.get() : bufs_[nxt][k].get());
      if (k < n_next) {
        bufs_[nxt][k]->recv(left_, slot_, 0, g_.seg_len(block_in(step + 1), k) * sizeof(T));
      }
      if (k >= n_in) continue;
      WaitRecv(bufs_[cur][k].get());
      const size_t n = g_.seg_len(b_in, k);
      T* acc = partial_[cur] + k * g_.seg;
      const T* mine = send_ + g_.off(b_in) + k * g_.seg;
      if (last) {
        T* dst = out_ + k * g_.seg;  // may be `mine` itself (in place): element-wise is fine
        Combine(op_, dst, acc, mine, n);
        FinishAvg(op_, dst, n, world_);
      } else {
        ReduceInto(op_, acc, mine, n);
        peer_ = right_;
        doing_ = "sending to";
        bufs_[cur][k]->send(right_, slot_, 0, n * sizeof(T));
      }
    }
  }

  const T* send_;
  T* out_;
  const ReduceOp op_;
  const RingGeometry g_;
  const Clock::time_point deadline_;
  const int world_, rank_, right_, left_;
  const uint64_t slot_ = ::gloo::Slot::build(kSlotPrefix, 0);
  T* partial_[2] = {nullptr, nullptr};
  std::unique_ptr<UnboundBuffer> input_;
  std::vector<std::unique_ptr<UnboundBuffer>> bufs_[2];
  std::vector<std::unique_ptr<ScopedTrack>> tracks_;
  // Where the ring is, for the error message.
  int step_ = 0;
  int peer_ = left_;
  const char* doing_ = "posting receives from";
};

}  // namespace

template <typename T>
void RingReduceScatter(const std::shared_ptr<::gloo::Context>& context, const T* send,
                       size_t total, size_t block, T* out, ReduceOp op,
                       Clock::time_point deadline, std::vector<std::byte>& scratch,
                       AbortableBuffers& abortable) {
  if (block == 0 || total == 0) return;
  const RingGeometry g{total, block, std::min(block, std::max<size_t>(1, kSegmentBytes / sizeof(T)))};
  if (context->size == 1) {
    if (out != send) std::memcpy(out, send, g.len(0) * sizeof(T));
    return;
  }
  Ring<T>(context, send, out, op, g, deadline, scratch, abortable).Run();
}

template void RingReduceScatter<float>(const std::shared_ptr<::gloo::Context>&, const float*,
                                       size_t, size_t, float*, ReduceOp, Clock::time_point,
                                       std::vector<std::byte>&, AbortableBuffers&);
template void RingReduceScatter<double>(const std::shared_ptr<::gloo::Context>&, const double*,
                                        size_t, size_t, double*, ReduceOp, Clock::time_point,
                                        std::vector<std::byte>&, AbortableBuffers&);
template void RingReduceScatter<Bf16Bits>(const std::shared_ptr<::gloo::Context>&,
                                          const Bf16Bits*, size_t, size_t, Bf16Bits*, ReduceOp,
                                          Clock::time_point, std::vector<std::byte>&,
                                          AbortableBuffers&);
template void RingReduceScatter<F16Bits>(const std::shared_ptr<::gloo::Context>&, const F16Bits*,
                                         size_t, size_t, F16Bits*, ReduceOp, Clock::time_point,
                                         std::vector<std::byte>&, AbortableBuffers&);

}  // namespace shard::comm
