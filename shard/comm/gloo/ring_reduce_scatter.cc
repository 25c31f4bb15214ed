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

}  // namespace

template <typename T>
void RingReduceScatter(const std::shared_ptr<::gloo::Context>& context, const T* send,
                       size_t total, size_t block, T* out, ReduceOp op,
                       Clock::time_point deadline, std::vector<std::byte>& scratch,
                       AbortableBuffers& abortable) {
  const int world = context->size;
  const int rank = context->rank;
  auto off = [&](int b) { return std::min(static_cast<size_t>(b) * block, total); };
  auto len = [&](int b) { return std::min(total, off(b) + block) - off(b); };
  if (block == 0 || total == 0) return;
  if (world == 1) {
    if (out != send) std::memcpy(out, send, len(0) * sizeof(T));
    return;
  }
  const int right = (rank + 1) % world;
  const int left = (rank + world - 1) % world;
  const size_t seg = std::min(block, std::max<size_t>(1, kSegmentBytes / sizeof(T)));
  auto nseg = [&](int b) { return (len(b) + seg - 1) / seg; };
  auto seg_len = [&](int b, size_t k) { return std::min(seg, len(b) - k * seg); };
  const size_t max_segs = (block + seg - 1) / seg;
  if (scratch.size() < 2 * block * sizeof(T)) scratch.resize(2 * block * sizeof(T));
  T* partial[2] = {reinterpret_cast<T*>(scratch.data()),
                   reinterpret_cast<T*>(scratch.data()) + block};
  const uint64_t slot = ::gloo::Slot::build(kSlotPrefix, 0);

  // Buffers first, their trackers after them, so trackers are destroyed first.
  auto input = context->createUnboundBuffer(const_cast<T*>(send), total * sizeof(T));
  std::vector<std::unique_ptr<UnboundBuffer>> bufs[2];
  for (int p = 0; p < 2; ++p) {
    for (size_t k = 0; k < max_segs; ++k) {
      const size_t n = std::min(seg, block - k * seg);
      bufs[p].push_back(context->createUnboundBuffer(partial[p] + k * seg, n * sizeof(T)));
    }
  }
  std::vector<std::unique_ptr<ScopedTrack>> tracks;
  tracks.push_back(std::make_unique<ScopedTrack>(abortable, input.get()));
  for (auto& side : bufs) {
    for (auto& b : side) tracks.push_back(std::make_unique<ScopedTrack>(abortable, b.get()));
  }

  int step = 0;
  int peer = left;
  const char* doing = "posting receives from";
  try {
    auto wait_send = [&](UnboundBuffer* b) {
      peer = right;
      doing = "sending to";
      if (!b->waitSend(Remaining(deadline))) throw WaitAborted();
    };
    auto wait_recv = [&](UnboundBuffer* b) {
      peer = left;
      doing = "receiving from";
      if (!b->waitRecv(Remaining(deadline))) throw WaitAborted();
    };
    auto block_in = [&](int s) { return Mod(rank - s - 2, world); };  // received in step s

    // Step 0: post every receive, then send our own copy of block rank-1.
    const int first_in = block_in(0);
    for (size_t k = 0; k < nseg(first_in); ++k) {
      bufs[0][k]->recv(left, slot, 0, seg_len(first_in, k) * sizeof(T));
    }
    const int first_out = Mod(rank - 1, world);
    peer = right;
    doing = "sending to";
    for (size_t k = 0; k < nseg(first_out); ++k) {
      input->send(right, slot, (off(first_out) + k * seg) * sizeof(T),
                  seg_len(first_out, k) * sizeof(T));
    }

    for (step = 0; step < world - 1; ++step) {
      const int cur = step & 1;
      const int nxt = cur ^ 1;
      const bool last = step == world - 2;
      const int b_in = block_in(step);
      // This step sends the block received last step (the input in step 0).
      const size_t n_send = nseg(step == 0 ? first_out : block_in(step - 1));
      const size_t n_in = nseg(b_in);
      const size_t n_next = last ? 0 : nseg(block_in(step + 1));
      for (size_t k = 0; k < std::max({n_send, n_in, n_next}); ++k) {
        // This step's send of segment k went out of bufs[nxt][k] (or the input); it must
        // finish before that buffer receives the next step's segment.
        if (k < n_send) wait_send(step == 0 ? input.get() : bufs[nxt][k].get());
        if (k < n_next) {
          bufs[nxt][k]->recv(left, slot, 0, seg_len(block_in(step + 1), k) * sizeof(T));
        }
        if (k >= n_in) continue;
        wait_recv(bufs[cur][k].get());
        const size_t n = seg_len(b_in, k);
        T* acc = partial[cur] + k * seg;
        const T* mine = send + off(b_in) + k * seg;
        if (last) {
          T* dst = out + k * seg;  // may be `mine` itself (in place): element-wise is fine
          Combine(op, dst, acc, mine, n);
          FinishAvg(op, dst, n, world);
        } else {
          ReduceInto(op, acc, mine, n);
          peer = right;
          doing = "sending to";
          bufs[cur][k]->send(right, slot, 0, n * sizeof(T));
        }
      }
    }
  } catch (const WaitAborted&) {
    throw;
  } catch (const std::exception& e) {
    throw ::gloo::IoException(std::string(e.what()) + " [ring reduce-scatter step " +
                              std::to_string(step + 1) + "/" + std::to_string(world - 1) +
                              ", " + doing + " rank " + std::to_string(peer) + "]");
  }
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
