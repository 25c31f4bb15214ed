// Reduce-scatter as a pipelined ring over Gloo's unbound buffers.
//
// The input (`total` elements) is cut into W blocks: block i is
// [i * block, min((i + 1) * block, total)) — equal blocks for ReduceScatter, the last
// ones shorter (possibly empty) when AllReduce splits an arbitrary count. In step s
// (0 <= s < W-1) rank r sends its running reduction of block (r-s-1) mod W to rank r+1
// and receives block (r-s-2) mod W from rank r-1, adding its own contribution; after
// W-1 steps block r has visited every rank and is written, fully reduced, to `out`.
// Each rank sends and receives (W-1)/W of the input: the bandwidth optimum. Blocks
// travel in 1 MiB segments, so reducing one segment overlaps the transfer of the next,
// and step s+1 of a segment starts as soon as step s of it is reduced.
//
// `out` may be exactly send + rank * block (in place): block r of the input is read
// only in the last step, element by element as the result is written. `scratch` is
// grown to 2 * block elements and reused across calls, so big calls do not page-fault
// fresh memory every time. Every buffer is registered with `abortable`.
//
// Throws on failure: gloo::IoException (timeouts, peer errors) with the step and peer
// rank appended, or std::runtime_error when Abort() woke a wait. The caller converts.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "shard/comm/communicator.h"
#include "shard/comm/wire_types.h"

namespace gloo {
class Context;
}

namespace shard::comm {

class AbortableBuffers;

template <typename T>
void RingReduceScatter(const std::shared_ptr<::gloo::Context>& context, const T* send,
                       size_t total, size_t block, T* out, ReduceOp op,
                       std::chrono::steady_clock::time_point deadline,
                       std::vector<std::byte>& scratch, AbortableBuffers& abortable);

extern template void RingReduceScatter<float>(const std::shared_ptr<::gloo::Context>&,
                                              const float*, size_t, size_t, float*, ReduceOp,
                                              std::chrono::steady_clock::time_point,
                                              std::vector<std::byte>&, AbortableBuffers&);
extern template void RingReduceScatter<double>(const std::shared_ptr<::gloo::Context>&,
                                               const double*, size_t, size_t, double*,
                                               ReduceOp, std::chrono::steady_clock::time_point,
                                               std::vector<std::byte>&, AbortableBuffers&);

// bf16/fp16 partial sums on the wire (mixed-precision gradient reduction).
extern template void RingReduceScatter<Bf16Bits>(const std::shared_ptr<::gloo::Context>&,
                                                 const Bf16Bits*, size_t, size_t, Bf16Bits*,
                                                 ReduceOp, std::chrono::steady_clock::time_point,
                                                 std::vector<std::byte>&, AbortableBuffers&);
extern template void RingReduceScatter<F16Bits>(const std::shared_ptr<::gloo::Context>&,
                                                const F16Bits*, size_t, size_t, F16Bits*,
                                                ReduceOp, std::chrono::steady_clock::time_point,
                                                std::vector<std::byte>&, AbortableBuffers&);

}  // namespace shard::comm
