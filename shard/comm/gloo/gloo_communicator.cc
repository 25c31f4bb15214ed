#include "shard/comm/gloo/gloo_communicator.h"

#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include "shard/comm/collective_util.h"
#include "shard/comm/gloo/abortable_buffers.h"
#include "shard/comm/gloo/kv_store_adapter.h"
#include "shard/comm/gloo/peer_watchdog.h"
#include "shard/comm/gloo/ring_reduce_scatter.h"
#include "shard/comm/wire_types.h"
#include "shard/common/kv_stores.h"

namespace shard {
namespace {

using Clock = std::chrono::steady_clock;
using ::gloo::transport::UnboundBuffer;

// BarrierOptions owns the buffer the barrier waits on; exposing it lets Abort() wake it.
struct AbortableBarrierOptions : ::gloo::BarrierOptions {
  using ::gloo::BarrierOptions::BarrierOptions;
  UnboundBuffer* wait_buffer() { return buffer.get(); }
};

// Gloo writes to its sockets with writev(2), so a peer that died makes the next write
// raise SIGPIPE, whose default action kills this process before Gloo can report
// EPIPE. A communicator must turn a dead peer into an error, not a second death, so
// SIGPIPE is ignored process-wide unless the program already installed a handler.
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Gloo reports timeouts as IoException with these words in the message.
bool LooksLikeTimeout(const std::string& message) {
  return message.find("Timed out") != std::string::npos ||
         message.find("timeout") != std::string::npos;
}

// One rank's connected Gloo context.
//
// Failure model: after a timeout Gloo closes every pair of the context, after a broken
// connection only that pair; either way the context is done for, so the first failure
// is remembered (failure_) and every later call returns it at once. Every failure also
// hard-closes this rank's remaining connections, so peers blocked on it fail at once
// too and the failure spreads through the group instead of waiting out timeouts.
//
// Interrupts — Abort() from any thread, or the PeerWatchdog seeing a dead peer while a
// call runs — mark the communicator failed, hard-close every pair (peers see a reset
// connection) and wake every wait of the call in flight (AbortableBuffers), re-waking
// until that call has returned. Why not something gentler: closing a pair does not wake
// this side's waiters, Debian's Gloo does not ship the headers (gloo/common/memory.h)
// needed to reach a pair's internal error signalling, and Gloo's own algorithms ignore a
// wait that returns "aborted" and go on to their next wait, so one wake is not enough.
//
// Thread-safety: collectives from one thread at a time; Abort() and the accessors from
// any thread. mu_ guards failure_ and interrupt_message_; interrupt_ and in_flight_
// are atomics. context_ is immutable after construction (Gloo's pair list is logically
// const, and Pair::close takes the pair's own lock).
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<::gloo::rendezvous::Context> context, std::string prefix)
      : watchdog_(
            context, [this] { return in_flight_ > 0; },
            [this](int peer, const std::string& message) {
              Interrupt(kPeerFailed, "peer rank " + std::to_string(peer) +
                                         " failed or closed its connection: " + message +
                                         " (it probably died or aborted; check its log)");
            }),
        context_(std::move(context)),
        name_("gloo:" + prefix + " rank " + std::to_string(context_->rank) + "/" +
              std::to_string(context_->size)) {
    watchdog_.Start();
  }

  // A healthy communicator says goodbye (so peers' watchdogs see a departure, not a
  // failure); then Gloo closes the pairs gently when the last context reference (the
  // watchdog's) goes: data already sent still reaches the peers, and a peer still
  // waiting on us sees the connection close.
  ~GlooCommunicator() override {
    watchdog_.Stop();  // its callbacks use members that are about to go
    bool healthy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      healthy = interrupt_ == kNone && failure_.ok();
    }
    if (healthy) watchdog_.SayGoodbye(std::chrono::seconds(1));
  }

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }
  std::string name() const override { return name_; }

  Status AllGather(const float* send, float* recv, int64_t count,
                   const CommOptions& options) override {
    return AllGather(send, recv, count, DType::kF32, options);
  }

  // Gloo's all-gather over raw bytes: the element type only sets the byte count.
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype,
                   const CommOptions& options) override {
    RETURN_IF_ERROR(comm::CheckArgs("AllGather", *this, count, send, recv));
    return Run("AllGather", options, [&] {
      if (count == 0) return;
      const size_t bytes = static_cast<size_t>(count) * DTypeSize(dtype);
      auto* out_bytes = static_cast<uint8_t*>(recv);
      uint8_t* own = out_bytes + static_cast<size_t>(rank()) * bytes;
      if (world_size() == 1) {
        if (own != send) std::memcpy(own, send, bytes);
        return;
      }
      ::gloo::AllgatherOptions opts(context_);
      auto out = context_->createUnboundBuffer(out_bytes, bytes * world_size());
      comm::ScopedTrack track_out(abortable_, out.get());
      std::unique_ptr<comm::ScopedTrack> track_in;
      if (own != send) {  // otherwise in place: our block already sits in recv
        auto in = context_->createUnboundBuffer(const_cast<void*>(send), bytes);
        track_in = std::make_unique<comm::ScopedTrack>(abortable_, in.get());
        opts.setInput<uint8_t>(std::move(in));
      }
      opts.setOutput<uint8_t>(std::move(out));
      opts.setTimeout(options.timeout);
      ::gloo::allgather(opts);
    });
  }

  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op,
                       const CommOptions& options) override {
    return ReduceScatterT(send, recv, count, op, options);
  }

  // Two-byte types run the same ring with comm::wire_types.h's arithmetic: the
  // partial sums travel as bf16/fp16, each hop adds in fp32 and rounds.
  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                       const CommOptions& options) override {
    return comm::WithWireType(dtype, send, recv, "ReduceScatter", *this, [&](const auto* s, auto* r) {
      return ReduceScatterT(s, r, count, op, options);  // fp32 is the float overload's ring too
    });
  }

  Status AllReduce(float* data, int64_t count, ReduceOp op, const CommOptions& options) override {
    return AllReduceT(data, count, op, options);
  }
  Status AllReduce(double* data, int64_t count, ReduceOp op,
                   const CommOptions& options) override {
    return AllReduceT(data, count, op, options);
  }

  Status Broadcast(float* data, int64_t count, int root, const CommOptions& options) override {
    RETURN_IF_ERROR(comm::CheckArgs("Broadcast", *this, count, data, data));
    RETURN_IF_ERROR(comm::CheckRoot("Broadcast", *this, root));
    return Run("Broadcast", options, [&] {
      if (world_size() == 1 || count == 0) return;
      ::gloo::BroadcastOptions opts(context_);
      auto buf = context_->createUnboundBuffer(data, static_cast<size_t>(count) * sizeof(float));
      comm::ScopedTrack track(abortable_, buf.get());
      opts.setOutput<float>(std::move(buf));
      opts.setRoot(root);
      opts.setTimeout(options.timeout);
      ::gloo::broadcast(opts);
    });
  }

  Status Barrier(const CommOptions& options) override {
    return Run("Barrier", options, [&] {
      if (world_size() == 1) return;
      AbortableBarrierOptions opts(context_);
      comm::ScopedTrack track(abortable_, opts.wait_buffer());
      opts.setTimeout(options.timeout);
      ::gloo::barrier(opts);
    });
  }

  void Abort(const std::string& reason) override {
    Interrupt(kAborted, reason.empty() ? "(no reason given)" : reason);
  }

 private:
  void ClosePairs() {
    for (int peer = 0; peer < world_size(); ++peer) {
      if (peer == rank()) continue;
      auto& pair = context_->getPair(peer);
      if (pair) pair->close();
    }
  }

  template <typename T>
  Status ReduceScatterT(const T* send, T* recv, int64_t count, ReduceOp op,
                        const CommOptions& options) {
    RETURN_IF_ERROR(comm::CheckArgs("ReduceScatter", *this, count, send, recv));
    return Run("ReduceScatter", options, [&] {
      const size_t n = static_cast<size_t>(count);
      comm::RingReduceScatter<T>(context_, send, n * world_size(), n, recv, op,
                                 Clock::now() + options.timeout, scratch_, abortable_);
    });
  }

  // Bandwidth-optimal all-reduce: our ring reduce-scatter of count/W-sized blocks in
  // place, then Gloo's all-gatherv of the (possibly uneven) blocks.
  template <typename T>
  Status AllReduceT(T* data, int64_t count, ReduceOp op, const CommOptions& options) {
    RETURN_IF_ERROR(comm::CheckArgs("AllReduce", *this, count, data, data));
    return Run("AllReduce", options, [&] {
      const size_t n = static_cast<size_t>(count);
      if (n == 0) return;
      const size_t w = static_cast<size_t>(world_size());
      if (w == 1) {
        comm::FinishAvg(op, data, n, 1);
        return;
      }
      const size_t block = (n + w - 1) / w;
      auto off = [&](size_t b) { return std::min(b * block, n); };
      comm::RingReduceScatter<T>(context_, data, n, block, data + off(rank()), op,
                                 Clock::now() + options.timeout, scratch_, abortable_);
      ::gloo::AllgathervOptions opts(context_);
      std::vector<size_t> elements(w);
      for (size_t b = 0; b < w; ++b) elements[b] = std::min(n, off(b) + block) - off(b);
      auto buf = context_->createUnboundBuffer(data, n * sizeof(T));
      comm::ScopedTrack track(abortable_, buf.get());
      opts.setOutput<T>(std::move(buf), std::move(elements));
      opts.setTimeout(options.timeout);
      ::gloo::allgatherv(opts);
    });
  }

  enum Interruption { kNone = 0, kAborted = 1, kPeerFailed = 2 };

  // Fails the communicator from outside the calling thread (see the class comment).
  void Interrupt(Interruption kind, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (interrupt_ != kNone) return;
      interrupt_message_ = message;
      interrupt_ = kind;
    }
    // Close first: once a pair's socket is closed no Gloo thread writes into a buffer
    // any more, so waking the waits below cannot let a caller free a buffer that is
    // still being filled.
    ClosePairs();
    const auto give_up = Clock::now() + std::chrono::seconds(5);
    do {
      abortable_.AbortAll();
      if (in_flight_ == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } while (Clock::now() < give_up);
  }

  // The status a call returns once an interruption happened. Needs mu_.
  Status InterruptedStatusLocked(const std::string& where) const {
    if (interrupt_ == kAborted) {
      return Aborted(where + ": communicator was aborted: " + interrupt_message_);
    }
    return Unavailable(where + ": " + interrupt_message_);
  }

  // Refuses calls after an abort or failure (even zero-count ones), runs `body` and
  // converts whatever Gloo throws into a Status naming the call and rank.
  template <typename Body>
  Status Run(const char* call, const CommOptions& options, Body&& body) {
    const std::string where = comm::Where(call, *this);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (interrupt_ != kNone) return InterruptedStatusLocked(where);
      if (!failure_.ok()) {
        return Status(failure_.code(),
                      where + ": communicator is unusable after an earlier failure: " +
                          failure_.message());
      }
    }
    InFlight in_flight(in_flight_);
    try {
      body();
    } catch (const std::exception& e) {
      return Fail(where, options, e.what());
    }
    if (interrupt_ != kNone) return Fail(where, options, "interrupted");
    return OkStatus();
  }

  Status Fail(const std::string& where, const CommOptions& options, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    Status status;
    if (interrupt_ != kNone) {
      status = InterruptedStatusLocked(where);
    } else if (LooksLikeTimeout(what)) {
      status = DeadlineExceeded(where + ": timed out after " +
                                std::to_string(options.timeout.count()) +
                                " ms (a peer never made this call, or is stuck or dead): " +
                                what);
    } else {
      status = Unavailable(where + ": a peer failed or closed its connection: " + what +
                           " (the peer probably died or aborted; check its log)");
    }
    if (failure_.ok()) failure_ = status;
    ClosePairs();
    return status;
  }

  struct InFlight {
    explicit InFlight(std::atomic<int>& n) : n_(n) { ++n_; }
    ~InFlight() { --n_; }
    std::atomic<int>& n_;
  };

  // First member, so destroyed last: it holds the final reference to the context and
  // closes the pairs before freeing the buffers Gloo may still write into.
  comm::PeerWatchdog watchdog_;
  const std::shared_ptr<::gloo::rendezvous::Context> context_;
  const std::string name_;
  comm::AbortableBuffers abortable_;
  std::vector<std::byte> scratch_;  // reduce-scatter scratch; calling thread only

  std::mutex mu_;
  std::atomic<int> interrupt_{kNone};  // an Interruption; written under mu_
  std::atomic<int> in_flight_{0};      // collectives currently running (0 or 1)
  std::string interrupt_message_;      // guarded by mu_
  Status failure_;                     // guarded by mu_; first failure, sticky
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  IgnoreSigpipeUnlessHandled();
  std::string prefix = config.prefix;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  const std::string where = "creating gloo communicator '" + config.prefix + "' rank " +
                            std::to_string(config.rank) + "/" +
                            std::to_string(config.world_size);
  ::gloo::transport::tcp::attr attr;
  if (!config.gloo_interface.empty()) {
    attr.iface = config.gloo_interface;
  } else {
    attr.hostname = config.gloo_hostname;
  }
  comm::KvStoreAdapter store(std::make_shared<PrefixKvStore>(config.store, prefix + "gloo/"),
                             config.timeout);
  try {
    std::shared_ptr<::gloo::transport::Device> device = ::gloo::transport::tcp::CreateDevice(attr);
    auto context =
        std::make_shared<::gloo::rendezvous::Context>(config.rank, config.world_size);
    context->setTimeout(config.timeout);
    context->connectFullMesh(store, device);
    std::string name = config.prefix;
    while (!name.empty() && name.back() == '/') name.pop_back();
    auto comm = std::make_unique<GlooCommunicator>(std::move(context), name);
    // connectFullMesh returns once this rank's pairs are connected, not everyone's, and
    // the watchdog's sentinels must be posted before any peer may leave. The barrier
    // holds every rank until all are connected and watched.
    Status st = comm->Barrier(CommOptions{config.timeout});
    if (!st.ok()) return Status(st.code(), where + ": " + st.message());
    return std::unique_ptr<Communicator>(std::move(comm));
  } catch (const std::exception& e) {
    Status store_error = store.first_error();
    if (!store_error.ok()) {
      return Status(store_error.code(), where + ": rendezvous failed: " + store_error.message());
    }
    const std::string what = e.what();
    const std::string addr = config.gloo_interface.empty()
                                 ? "hostname '" + config.gloo_hostname + "'"
                                 : "interface '" + config.gloo_interface + "'";
    if (LooksLikeTimeout(what)) {
      return DeadlineExceeded(where + ": connecting to peers timed out after " +
                              std::to_string(config.timeout.count()) + " ms: " + what);
    }
    return Unavailable(where + " on " + addr + ": " + what +
                       " (check that the address is reachable from every rank, and that "
                       "the prefix is fresh: reusing one reads stale peer addresses)");
  }
}

}  // namespace shard
