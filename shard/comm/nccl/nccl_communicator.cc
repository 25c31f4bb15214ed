#include "shard/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shard/comm/collective_util.h"
#include "shard/common/checksum.h"

namespace shard {
namespace {

using Clock = std::chrono::steady_clock;

bool Unhex(const std::string& s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; ++i) {
    const int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

ncclDataType_t ToNccl(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclHalf;
  }
  return ncclFloat;
}

bool IsDevicePointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Thread-safety: collectives from one thread at a time (the interface's rule);
// Abort() and the accessors from any thread. mu_ guards comm_ teardown,
// failure_ and in_flight_; aborted_ is an atomic the polling loop reads.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const CommConfig& c, int device)
      : rank_(c.rank), world_(c.world_size), device_(device), compute_(static_cast<cudaStream_t>(c.device_stream)) {
    name_ = "nccl:" + c.prefix + " rank " + std::to_string(rank_) + "/" + std::to_string(world_);
  }
  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> l(mu_);
    if (comm_) {
      cudaSetDevice(device_);
      // A clean goodbye: finalize (flushes outstanding work, polled with a
      // bound), then destroy; abort when that does not finish.
      ncclResult_t st = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while ((st == ncclSuccess || st == ncclInProgress) && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess || st != ncclInProgress) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (st == ncclSuccess) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    if (scratch_) cudaFree(scratch_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init(const CommConfig& c) {
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) return Unavailable(name_ + ": cudaStreamCreate: " + cudaGetErrorString(e));
    if (compute_) {
      e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
      if (e != cudaSuccess) return Unavailable(name_ + ": cudaEventCreate: " + cudaGetErrorString(e));
    }
    ncclUniqueId id;
    const std::string key = c.prefix + "nccl_unique_id";
    if (rank_ == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return Unavailable(name_ + ": ncclGetUniqueId: " + ncclGetErrorString(r));
      RETURN_IF_ERROR(c.store->Set(key, BytesToHex(&id, sizeof id)).WithContext(name_ + ": publishing the NCCL id"));
    } else {
      auto v = c.store->Get(key, c.timeout);
      if (!v.ok()) return v.status().WithContext(name_ + ": waiting for rank 0's NCCL id");
      if (!Unhex(*v, &id, sizeof id)) return DataLoss(name_ + ": the NCCL id under '" + key + "' is malformed");
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      return Unavailable(name_ + ": ncclCommInitRankConfig: " + ncclGetErrorString(r));
    }
    const auto deadline = Clock::now() + c.timeout;
    ncclResult_t st = ncclInProgress;
    while (ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st == ncclInProgress) {
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return DeadlineExceeded(name_ + ": NCCL init did not finish within " + std::to_string(c.timeout.count()) +
                                " ms (not every rank joined?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (st != ncclSuccess) {
      const std::string why = ncclGetLastError(comm_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
      return Unavailable(name_ + ": NCCL init failed: " + ncclGetErrorString(st) + " " + why);
    }
    return OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string name() const override { return name_; }

  Status AllGather(const float* send, float* recv, int64_t count, const CommOptions& o) override {
    return AllGather(send, recv, count, DType::kF32, o);
  }

  Status AllGather(const void* send, void* recv, int64_t count, DType dtype, const CommOptions& o) override {
    RETURN_IF_ERROR(comm::CheckArgs("AllGather", *this, count, send, recv));
    if (count == 0) return Failure();
    const size_t n = static_cast<size_t>(count), elem = DTypeSize(dtype);
    const bool in_place = send == static_cast<const char*>(recv) + rank_ * n * elem;
    return Staged("AllGather", o, send, n * elem, recv, n * world_ * elem, in_place ? rank_ * n * elem : kNoAlias,
                  [&](const void* s, void* r, cudaStream_t st) {
                    return ncclAllGather(s, r, n, ToNccl(dtype), comm_, st);
                  });
  }

  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op, const CommOptions& o) override {
    return ReduceScatter(send, recv, count, DType::kF32, op, o);
  }

  // bf16/fp16: NCCL reduces in the two-byte type (its kernels add in fp32 and
  // round per hop, in NCCL's own order, so the bits may differ from gloo's ring).
  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                       const CommOptions& o) override {
    RETURN_IF_ERROR(comm::CheckArgs("ReduceScatter", *this, count, send, recv));
    if (count == 0) return Failure();
    const size_t n = static_cast<size_t>(count), elem = DTypeSize(dtype);
    // Staging places recv first, then send; an in-place recv is a view into send.
    const bool in_place = recv == static_cast<const char*>(send) + rank_ * n * elem;
    return StagedRs("ReduceScatter", o, send, n * world_ * elem, recv, n * elem, in_place ? rank_ * n * elem : kNoAlias,
                    [&](const void* s, void* r, cudaStream_t st) {
                      return ncclReduceScatter(s, r, n, ToNccl(dtype), ToNccl(op), comm_, st);
                    });
  }

  Status AllReduce(float* data, int64_t count, ReduceOp op, const CommOptions& o) override {
    return AllReduceT("AllReduce", data, count, ncclFloat, sizeof(float), op, o);
  }
  Status AllReduce(double* data, int64_t count, ReduceOp op, const CommOptions& o) override {
    return AllReduceT("AllReduce", data, count, ncclDouble, sizeof(double), op, o);
  }

  // One NCCL group when every buffer is device memory: the all-reduces launch
  // together and complete together (one ordering event, one poll). Host
  // buffers are staged one by one through the scratch buffer, as AllReduce does.
  Status AllReduceMany(const std::vector<Buffer>& buffers, ReduceOp op, const CommOptions& o) override {
    UseDevice();
    std::vector<Buffer> live;
    for (size_t i = 0; i < buffers.size(); ++i) {
      const Buffer& b = buffers[i];
      RETURN_IF_ERROR(comm::CheckArgs("AllReduceMany", *this, b.count, b.data, b.data)
                          .WithContext("buffer " + std::to_string(i)));
      if (b.count == 0) continue;
      if (!IsDevicePointer(b.data)) return Communicator::AllReduceMany(buffers, op, o);
      live.push_back(b);
    }
    if (live.empty()) return Failure();
    return Run("AllReduceMany", o, [&](cudaStream_t st) {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      for (const Buffer& b : live) {
        r = ncclAllReduce(b.data, b.data, static_cast<size_t>(b.count), ncclFloat, ToNccl(op), comm_, st);
        // Inside a group a non-blocking communicator defers the launch; any
        // other result is an argument error: still close the group.
        if (r != ncclSuccess && r != ncclInProgress) {
          ncclGroupEnd();
          return r;
        }
      }
      return ncclGroupEnd();  // ncclInProgress: Run polls until the group completes
    });
  }

  Status Broadcast(float* data, int64_t count, int root, const CommOptions& o) override {
    RETURN_IF_ERROR(comm::CheckArgs("Broadcast", *this, count, data, data));
    RETURN_IF_ERROR(comm::CheckRoot("Broadcast", *this, root));
    if (count == 0) return Failure();
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    return InPlace("Broadcast", o, data, bytes, [&](void* d, cudaStream_t st) {
      return ncclBroadcast(d, d, static_cast<size_t>(count), ncclFloat, root, comm_, st);
    });
  }

  Status Barrier(const CommOptions& o) override {
    float one = 1.0f;  // host: staged
    return AllReduce(&one, 1, ReduceOp::kSum, o);
  }

  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> l(mu_);
    if (aborted_.exchange(true)) return;
    if (failure_.ok()) failure_ = Aborted(name_ + ": aborted: " + reason);
    // A call in flight polls aborted_ and tears the communicator down itself
    // (it owns comm_ while polling); otherwise do it now.
    if (!in_flight_) AbortCommLocked();
  }

 private:
  static constexpr size_t kNoAlias = static_cast<size_t>(-1);
  using Issue = std::function<ncclResult_t(cudaStream_t)>;

  Status Failure() {
    std::lock_guard<std::mutex> l(mu_);
    return failure_;
  }

  void AbortCommLocked() {
    if (comm_) {
      cudaSetDevice(device_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  // Every call selects our GPU first, on whichever thread makes it (the FSDP
  // runtime's communication thread never set one): the pointer queries, the
  // scratch allocation and the staging copies below would otherwise run on
  // GPU 0 — a stray context there per rank, and scratch on the wrong device.
  void UseDevice() { cudaSetDevice(device_); }

  // Device scratch of at least `bytes` (for host-memory arguments).
  StatusOr<char*> Scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      cudaError_t e = cudaMalloc(&scratch_, bytes);
      if (e != cudaSuccess) return ResourceExhausted(name_ + ": staging buffer: " + cudaGetErrorString(e));
      scratch_bytes_ = bytes;
    }
    return static_cast<char*>(scratch_);
  }

  Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return Internal(name_ + ": staging copy: " + cudaGetErrorString(e));
    return OkStatus();
  }

  // Runs one collective: waits for the device's queued work, issues, polls to
  // completion against the deadline, the abort flag and NCCL's async error.
  Status Run(const char* call, const CommOptions& o, const Issue& issue) {
    const std::string where = comm::Where(call, *this);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!failure_.ok()) return failure_;
      if (!comm_) return failure_ = Aborted(where + ": the communicator is closed");
      in_flight_ = true;
    }
    Status st = RunInFlight(where, o, issue);
    std::lock_guard<std::mutex> l(mu_);
    in_flight_ = false;
    if (!st.ok()) {
      if (failure_.ok()) failure_ = st;
      AbortCommLocked();
      return failure_;
    }
    if (aborted_) {  // Abort() arrived while the call finished
      AbortCommLocked();
      return failure_;
    }
    return OkStatus();
  }

  // Orders the collective after the compute stream's work: the caller's event
  // (CommOptions::ready_event) when given, else an event recorded there now;
  // either way stream_ waits for it — the device does the waiting, this
  // thread does not. Recording from this thread while the compute thread
  // queues more work is fine (the runtime API is thread-safe): the event sits
  // no earlier than every op queued before this call began, which is all a
  // buffer passed in can depend on. Re-recording ready_ next call is safe:
  // cudaStreamWaitEvent uses the record current when it is called. Without a
  // compute stream the whole device is synchronised (correct for any
  // producer, and serialising). The call's deadline now also covers the
  // device finishing that compute, which used to be waited for before it.
  Status OrderAfterCompute(const std::string& where, const CommOptions& o) {
    cudaError_t e;
    if (o.ready_event && compute_) {  // the caller's record, from when it queued the call
      e = cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(o.ready_event), 0);
    } else if (compute_) {
      e = cudaEventRecord(ready_, compute_);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, ready_, 0);
    } else {
      e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) return Internal(where + ": device error before the call: " + cudaGetErrorString(e));
    return OkStatus();
  }

  Status RunInFlight(const std::string& where, const CommOptions& o, const Issue& issue) {
    UseDevice();
    RETURN_IF_ERROR(OrderAfterCompute(where, o));
    const auto deadline = Clock::now() + o.timeout;
    ncclResult_t r = issue(stream_);
    if (r != ncclSuccess && r != ncclInProgress)
      return Unavailable(where + ": " + ncclGetErrorString(r) + " " + ncclGetLastError(comm_));
    auto check = [&](bool* done) -> Status {
      if (aborted_) return Aborted(where + ": aborted");
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress)
        return Unavailable(where + ": NCCL error: " + ncclGetErrorString(st) + " " + ncclGetLastError(comm_));
      if (st == ncclSuccess) {
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) {
          *done = true;
          return OkStatus();
        }
        if (q != cudaErrorNotReady) return Internal(where + ": " + cudaGetErrorString(q));
      }
      if (Clock::now() > deadline)
        return DeadlineExceeded(where + ": timed out after " + std::to_string(o.timeout.count()) +
                                " ms (NCCL communicator aborted)");
      return OkStatus();
    };
    for (int spins = 0;; ++spins) {
      bool done = false;
      RETURN_IF_ERROR(check(&done));
      if (done) return OkStatus();
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  template <typename T>
  Status AllReduceT(const char* call, T* data, int64_t count, ncclDataType_t type, size_t elem, ReduceOp op,
                    const CommOptions& o) {
    RETURN_IF_ERROR(comm::CheckArgs(call, *this, count, data, data));
    if (count == 0) return Failure();
    return InPlace(call, o, data, static_cast<size_t>(count) * elem, [&](void* d, cudaStream_t st) {
      return ncclAllReduce(d, d, static_cast<size_t>(count), type, ToNccl(op), comm_, st);
    });
  }

  // One in-place buffer, device or host (staged).
  Status InPlace(const char* call, const CommOptions& o, void* data, size_t bytes,
                 const std::function<ncclResult_t(void*, cudaStream_t)>& f) {
    UseDevice();
    if (IsDevicePointer(data)) return Run(call, o, [&](cudaStream_t st) { return f(data, st); });
    ASSIGN_OR_RETURN(char* dev, Scratch(bytes));
    RETURN_IF_ERROR(Copy(dev, data, bytes, cudaMemcpyHostToDevice));
    RETURN_IF_ERROR(Run(call, o, [&](cudaStream_t st) { return f(dev, st); }));
    return Copy(data, dev, bytes, cudaMemcpyDeviceToHost);
  }

  using Issue2 = std::function<ncclResult_t(const void*, void*, cudaStream_t)>;

  // All-gather: send (send_bytes) lands in recv (recv_bytes); `alias` is the
  // byte offset of send inside recv for in-place calls.
  Status Staged(const char* call, const CommOptions& o, const void* send, size_t send_bytes, void* recv,
                size_t recv_bytes, size_t alias, const Issue2& f) {
    UseDevice();
    const bool dev_s = IsDevicePointer(send), dev_r = IsDevicePointer(recv);
    if (dev_s != dev_r)
      return InvalidArgument(comm::Where(call, *this) + ": send and receive buffers must both be device or host memory");
    if (dev_r) return Run(call, o, [&](cudaStream_t st) { return f(send, recv, st); });
    ASSIGN_OR_RETURN(char* dev, Scratch(recv_bytes + send_bytes));
    char* d_recv = dev;
    char* d_send = alias != kNoAlias ? d_recv + alias : d_recv + recv_bytes;
    RETURN_IF_ERROR(Copy(d_send, send, send_bytes, cudaMemcpyHostToDevice));
    RETURN_IF_ERROR(Run(call, o, [&](cudaStream_t st) { return f(d_send, d_recv, st); }));
    return Copy(recv, d_recv, recv_bytes, cudaMemcpyDeviceToHost);
  }

  // Reduce-scatter: send (send_bytes) reduces into recv (recv_bytes); `alias`
  // is the byte offset of recv inside send for in-place calls.
  Status StagedRs(const char* call, const CommOptions& o, const void* send, size_t send_bytes, void* recv,
                  size_t recv_bytes, size_t alias, const Issue2& f) {
    UseDevice();
    const bool dev_s = IsDevicePointer(send), dev_r = IsDevicePointer(recv);
    if (dev_s != dev_r)
      return InvalidArgument(comm::Where(call, *this) + ": send and receive buffers must both be device or host memory");
    if (dev_r) return Run(call, o, [&](cudaStream_t st) { return f(send, recv, st); });
    ASSIGN_OR_RETURN(char* dev, Scratch(send_bytes + recv_bytes));
    char* d_send = dev;
    char* d_recv = alias != kNoAlias ? d_send + alias : d_send + send_bytes;
    RETURN_IF_ERROR(Copy(d_send, send, send_bytes, cudaMemcpyHostToDevice));
    RETURN_IF_ERROR(Run(call, o, [&](cudaStream_t st) { return f(d_send, d_recv, st); }));
    return Copy(recv, d_recv, recv_bytes, cudaMemcpyDeviceToHost);
  }

  const int rank_, world_, device_;
  std::string name_;
  const cudaStream_t compute_;  // CommConfig::device_stream; null: cudaDeviceSynchronize before each call
  cudaEvent_t ready_ = nullptr;  // recorded on compute_, waited on by stream_ (null without compute_)
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // owned by the calling thread (collectives are serial)
  size_t scratch_bytes_ = 0;
  std::mutex mu_;
  ncclComm_t comm_ = nullptr;  // guarded by mu_ for teardown; used unlocked by the one calling thread
  Status failure_;             // guarded by mu_
  bool in_flight_ = false;     // guarded by mu_
  std::atomic<bool> aborted_{false};
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommConfig& config) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    return Unavailable(std::string("nccl: no CUDA device (cudaGetDeviceCount: ") +
                       (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  int device = 0;
  cudaGetDevice(&device);
  auto c = std::make_unique<NcclCommunicator>(config, device);
  RETURN_IF_ERROR(c->Init(config));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace shard
