// The Communicator seam: the collectives FSDP needs, over one group of ranks.
//
// Backends live in folders with the same shape (local/, gloo/, nccl/), each
// exposing one factory; CreateCommunicator picks one by name. Nothing outside those
// folders includes a backend header.
//
//   local  ranks are threads of one process; data moves through shared memory.
//          For unit tests of everything above the communicator.
//   gloo   ranks are processes; Gloo's TCP transport (loopback by default).
//   nccl   GPUs, one rank per device (built with CUDA; see nccl/nccl_communicator.h).
//   sim    moves nothing: one rank of the memory simulator stands for the world
//          (sim/sim_communicator.h). Not for training.
//
// Semantics every backend honours (the conformance tests check them):
//  * Calls are collective: every rank of the group makes the same sequence of calls
//    with the same counts (and root / op). Calls are matched by order.
//  * Every call gives up after options.timeout with DEADLINE_EXCEEDED (see the gloo
//    header for one caveat).
//  * After a failed call (timeout, peer failure, abort) the communicator is unusable:
//    later calls fail at once. The caller tears the attempt down and starts a new one.
//  * A peer that dies, aborts or times out makes the survivors' calls fail
//    (UNAVAILABLE, naming the cause) rather than hang: local at once; gloo as soon as
//    the TCP connection drops (at once for a killed process), noticed by Gloo or by a
//    watchdog that probes the connections every 50 ms while a call runs.
//  * Counts of zero are legal and return OK without synchronising (after an Abort or
//    a failure they return the error like any call).
//  * Errors name the call, the backend, the group and the rank ("AllReduce on
//    gloo:job/a0/world rank 1/4: ..."), the peer where known, and for timeouts the
//    timeout value.
//
// Thread-safety: collectives of one communicator must be called from one thread at a
// time (they are ordered). rank(), world_size(), name() and Abort() may be called from
// any thread at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shard/common/kv_store.h"
#include "shard/common/status.h"
#include "shard/tensor/dtype.h"

namespace shard {

enum class ReduceOp { kSum, kAvg, kMax };

const char* ReduceOpName(ReduceOp op);

// Per-call options. Kept as a struct so tags/streams can be added without touching
// every call site.
struct CommOptions {
  // Longest the call may block, end to end. Nothing waits forever.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // nccl with a compute stream (CommConfig::device_stream): an event on that
  // stream (BackendEvent::native_handle(), a cudaEvent_t), recorded when the
  // caller queued this call after producing its buffers; the collective orders
  // after it instead of after everything queued by the time it is issued —
  // a communication thread issues later, when compute the call does not need
  // is queued too. It must stay alive until the call returns. Null: the
  // communicator records its own event at issue time. Others ignore it.
  void* ready_event = nullptr;
  // The FSDP unit this call moves (-1: none): recorded by the flight
  // recorder (flight_recorder.h) so a stall names it. Backends ignore it.
  int unit = -1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "gloo:job/a0/shard0 rank 1/4" — for logs and error messages.
  virtual std::string name() const = 0;

  // recv holds world_size * count_per_rank elements; rank r's `send` lands at
  // recv + r * count_per_rank. In place when send == recv + rank() * count_per_rank.
  virtual Status AllGather(const float* send, float* recv, int64_t count_per_rank,
                           const CommOptions& options) = 0;

  // send holds world_size * count_per_rank elements; rank r receives the reduction
  // over ranks of block r (send + r * count_per_rank). kAvg divides the sum by
  // world_size. In place when recv == send + rank() * count_per_rank.
  virtual Status ReduceScatter(const float* send, float* recv, int64_t count_per_rank,
                               ReduceOp op, const CommOptions& options) = 0;

  // Dtype-generic all-gather (an all-gather only moves bytes): the same layout and
  // in-place rule as above, counted in elements of `dtype`, so bf16/fp16 (mixed
  // precision's gathered weights) move half the bytes of fp32.
  virtual Status AllGather(const void* send, void* recv, int64_t count_per_rank, DType dtype,
                           const CommOptions& options) = 0;

  // Reduce-scatter of `dtype` elements, same layout and in-place rule as above.
  // fp32 is the float overload. bf16/fp16 travel as two bytes; each hop widens
  // to fp32, combines, and rounds once back (nearest even). local and gloo
  // combine block b in ring order, ranks b+1, b+2, ..., b (mod world), so they
  // give identical bits (comm::RingOrderReduce is the reference); nccl uses
  // ncclBfloat16/ncclHalf and its own order. kAvg divides the rounded sum in
  // fp32 and rounds again.
  virtual Status ReduceScatter(const void* send, void* recv, int64_t count_per_rank, DType dtype,
                               ReduceOp op, const CommOptions& options) = 0;

  // In place: every rank ends with the reduction of all ranks' data.
  virtual Status AllReduce(float* data, int64_t count, ReduceOp op,
                           const CommOptions& options) = 0;
  virtual Status AllReduce(double* data, int64_t count, ReduceOp op,
                           const CommOptions& options) = 0;

  // Several in-place all-reduces as one call, same semantics as calling
  // AllReduce on each buffer in order (every rank passes the same counts). The
  // default does exactly that; nccl issues them as one NCCL group (one launch,
  // one completion wait) when every buffer is device memory. Errors name the
  // buffer's index.
  struct Buffer {
    float* data = nullptr;
    int64_t count = 0;
  };
  virtual Status AllReduceMany(const std::vector<Buffer>& buffers, ReduceOp op, const CommOptions& options);

  // Copies root's data into every other rank's data.
  virtual Status Broadcast(float* data, int64_t count, int root, const CommOptions& options) = 0;

  virtual Status Barrier(const CommOptions& options) = 0;

  // Makes any call waiting now, and every later call, return ABORTED promptly (well
  // under a second). Peers blocked on this rank see their calls fail too. Idempotent;
  // safe from any thread, including while another thread is inside a collective.
  virtual void Abort(const std::string& reason) = 0;
};

struct CommConfig {
  // "local", "gloo", "nccl" or "sim".
  std::string backend = "gloo";
  // This process's (or thread's) rank in the group, 0 <= rank < world_size.
  int rank = 0;
  int world_size = 1;
  // Rendezvous store (gloo: addresses; nccl: the unique id). Required for gloo; the
  // local backend rendezvouses in process memory and ignores it.
  std::shared_ptr<KvStore> store;
  // Namespaces this group's rendezvous keys ("job/attempt/group/"). Must be unique per
  // communicator instance: sub-groups (hybrid sharding's shard and replicate groups)
  // are made by calling CreateCommunicator again with another prefix and the sub-rank
  // and sub-world. The local backend uses it as the group's name in this process.
  std::string prefix;
  // Gloo TCP transport: address to bind and advertise (loopback by default), or a
  // network interface name, which wins when set (e.g. "eth0").
  std::string gloo_hostname = "127.0.0.1";
  std::string gloo_interface;
  // Longest the rendezvous and connection setup may take.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // nccl: the compute stream the collectives order after (a cudaStream_t,
  // Backend::native_stream()): each call makes its own stream wait for an
  // event recorded there, so it never blocks the calling thread on compute.
  // Null: the device is synchronised before each call, as before. local and
  // gloo ignore it (their buffers are host memory, complete when passed).
  void* device_stream = nullptr;

  Status Validate() const;
};

// Creates and connects this rank's communicator. Blocks until every rank of the group
// has joined or config.timeout passes (DEADLINE_EXCEEDED naming who is missing).
StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommConfig& config);

}  // namespace shard
