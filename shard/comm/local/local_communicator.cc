#include "shard/comm/local/local_communicator.h"

#include <cstring>
#include <vector>

#include "shard/comm/collective_util.h"
#include "shard/comm/local/local_group.h"
#include "shard/comm/wire_types.h"

namespace shard {
namespace {

using comm::LocalGroup;
using comm::LocalPost;
using Clock = std::chrono::steady_clock;

std::string TrimSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// One rank's handle on a LocalGroup. Collectives are two phases (see local_group.h):
// publish buffers and wait for everyone, compute this rank's output from the peers'
// buffers, then wait for everyone again so no buffer is reused while a peer reads it.
//
// Thread-safety: collectives from one thread at a time (the Communicator contract);
// Abort and the accessors from any thread (they touch only the group, which locks).
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)),
        rank_(rank),
        name_("local:" + TrimSlash(group_->name()) + " rank " + std::to_string(rank) + "/" +
              std::to_string(group_->world_size())) {}

  ~LocalCommunicator() override { group_->Leave(rank_); }

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  std::string name() const override { return name_; }

  Status AllGather(const float* send, float* recv, int64_t count,
                   const CommOptions& options) override {
    return AllGather(send, recv, count, DType::kF32, options);
  }

  Status AllGather(const void* send, void* recv, int64_t count, DType dtype,
                   const CommOptions& options) override {
    const char* call = "AllGather";
    RETURN_IF_ERROR(Begin(call, count, send, recv));
    if (count == 0) return OkStatus();
    const size_t elem = DTypeSize(dtype);
    const size_t bytes = static_cast<size_t>(count) * elem;
    LocalPost post{call, send, recv, count, -1, -1, static_cast<int>(elem)};
    Phases ph(this, call, options);
    RETURN_IF_ERROR(ph.First(post));
    for (int r = 0; r < world_size(); ++r) {
      const void* src = group_->post(r).send;
      char* dst = static_cast<char*>(recv) + static_cast<size_t>(r) * bytes;
      if (src != dst) std::memcpy(dst, src, bytes);
    }
    return ph.Second();
  }

  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op,
                       const CommOptions& options) override {
    const char* call = "ReduceScatter";
    RETURN_IF_ERROR(Begin(call, count, send, recv));
    if (count == 0) return OkStatus();
    LocalPost post{call, send, recv, count, -1, static_cast<int>(op), sizeof(float)};
    Phases ph(this, call, options);
    RETURN_IF_ERROR(ph.First(post));
    // Reduce block rank_ of every peer in chunks through a small buffer, always in rank
    // order, so the result is deterministic and recv may alias our own block.
    constexpr int64_t kChunk = 4096;
    std::vector<float> acc(static_cast<size_t>(std::min(count, kChunk)));
    const int64_t base = static_cast<int64_t>(rank_) * count;
    for (int64_t off = 0; off < count; off += kChunk) {
      const size_t n = static_cast<size_t>(std::min(kChunk, count - off));
      const float* first = static_cast<const float*>(group_->post(0).send) + base + off;
      std::memcpy(acc.data(), first, n * sizeof(float));
      for (int r = 1; r < world_size(); ++r) {
        const float* src = static_cast<const float*>(group_->post(r).send) + base + off;
        comm::ReduceInto(op, acc.data(), src, n);
      }
      comm::FinishAvg(op, acc.data(), n, world_size());
      std::memcpy(recv + off, acc.data(), n * sizeof(float));
    }
    return ph.Second();
  }

  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                       const CommOptions& options) override {
    return comm::WithWireType(dtype, send, recv, "ReduceScatter", *this, [&]<typename T>(const T* s, T* r) {
      if constexpr (std::is_same_v<T, float>) {
        return ReduceScatter(s, r, count, op, options);
      } else {
        const char* call = std::is_same_v<T, comm::Bf16Bits> ? "ReduceScatter(bf16)" : "ReduceScatter(fp16)";
        return ReduceScatterWire(call, s, r, count, op, options);
      }
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
    const char* call = "Broadcast";
    RETURN_IF_ERROR(Begin(call, count, data, data));
    RETURN_IF_ERROR(comm::CheckRoot(call, *this, root));
    if (count == 0) return OkStatus();
    LocalPost post{call, data, data, count, root, -1, sizeof(float)};
    Phases ph(this, call, options);
    RETURN_IF_ERROR(ph.First(post));
    if (rank_ != root) {
      std::memcpy(data, group_->post(root).send, static_cast<size_t>(count) * sizeof(float));
    }
    return ph.Second();
  }

  Status Barrier(const CommOptions& options) override {
    const char* call = "Barrier";
    RETURN_IF_ERROR(Begin(call, 0, nullptr, nullptr));
    LocalPost post{call, nullptr, nullptr, 0, -1, -1, 0};
    Phases ph(this, call, options);
    return ph.First(post);  // nothing is read, so one phase suffices
  }

  void Abort(const std::string& reason) override { group_->Abort(rank_, reason); }

 private:
  // The deadline and error prefix of one call.
  struct Phases {
    Phases(LocalCommunicator* c, const char* call, const CommOptions& options)
        : comm(c),
          where(comm::Where(call, *c)),
          timeout(options.timeout),
          deadline(Clock::now() + options.timeout) {}
    Status First(const LocalPost& post) {
      return comm->group_->Arrive(comm->rank_, &post, deadline, timeout, where);
    }
    Status Second() { return comm->group_->Arrive(comm->rank_, nullptr, deadline, timeout, where); }

    LocalCommunicator* comm;
    std::string where;
    std::chrono::milliseconds timeout;
    Clock::time_point deadline;
  };

  // Argument checks, then refuses calls on a broken (aborted, timed-out) group.
  Status Begin(const char* call, int64_t count, const void* a, const void* b) {
    RETURN_IF_ERROR(comm::CheckArgs(call, *this, count, a, b));
    return group_->CheckUsable(rank_, comm::Where(call, *this));
  }

  // Two-byte reduce-scatter with the gloo ring's arithmetic and order (see
  // communicator.h): block rank_ starts from rank_+1's copy, each later rank's
  // contribution is added in fp32 and rounded, and our own comes last.
  template <typename W>
  Status ReduceScatterWire(const char* call, const W* send, W* recv, int64_t count, ReduceOp op,
                           const CommOptions& options) {
    RETURN_IF_ERROR(Begin(call, count, send, recv));
    if (count == 0) return OkStatus();
    LocalPost post{call, send, recv, count, -1, static_cast<int>(op), sizeof(W)};
    Phases ph(this, call, options);
    RETURN_IF_ERROR(ph.First(post));
    const int w = world_size();
    const int64_t base = static_cast<int64_t>(rank_) * count;
    auto block_of = [&](int r, int64_t off) {
      return static_cast<const W*>(group_->post(r).send) + base + off;
    };
    if (w == 1) {
      if (recv != send + base) std::memcpy(recv, send + base, static_cast<size_t>(count) * sizeof(W));
      return ph.Second();
    }
    constexpr int64_t kChunk = 4096;
    std::vector<W> acc(static_cast<size_t>(std::min(count, kChunk)));
    for (int64_t off = 0; off < count; off += kChunk) {
      const size_t n = static_cast<size_t>(std::min(kChunk, count - off));
      std::memcpy(acc.data(), block_of((rank_ + 1) % w, off), n * sizeof(W));
      for (int k = 2; k < w; ++k) comm::ReduceInto(op, acc.data(), block_of((rank_ + k) % w, off), n);
      // recv may be our own block (in place): element-wise read-then-write is fine.
      comm::Combine(op, recv + off, acc.data(), block_of(rank_, off), n);
      comm::FinishAvg(op, recv + off, n, w);
    }
    return ph.Second();
  }

  template <typename T>
  Status AllReduceT(T* data, int64_t count, ReduceOp op, const CommOptions& options) {
    const char* call = "AllReduce";
    RETURN_IF_ERROR(Begin(call, count, data, data));
    if (count == 0) return OkStatus();
    const size_t n = static_cast<size_t>(count);
    LocalPost post{call, data, data, count, -1, static_cast<int>(op), sizeof(T)};
    Phases ph(this, call, options);
    RETURN_IF_ERROR(ph.First(post));
    // Every rank reduces in rank order into a private buffer (so all ranks get bitwise
    // identical results) and copies it over `data` only after no peer reads it any more.
    std::vector<T> result(static_cast<const T*>(group_->post(0).send),
                          static_cast<const T*>(group_->post(0).send) + n);
    for (int r = 1; r < world_size(); ++r) {
      comm::ReduceInto(op, result.data(), static_cast<const T*>(group_->post(r).send), n);
    }
    comm::FinishAvg(op, result.data(), n, world_size());
    RETURN_IF_ERROR(ph.Second());
    std::memcpy(data, result.data(), n * sizeof(T));
    return OkStatus();
  }

  const std::shared_ptr<LocalGroup> group_;
  const int rank_;
  const std::string name_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateLocalCommunicator(const CommConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(std::shared_ptr<LocalGroup> group,
                   LocalGroup::Join(config.prefix, config.rank, config.world_size,
                                    config.timeout));
  return std::unique_ptr<Communicator>(new LocalCommunicator(std::move(group), config.rank));
}

}  // namespace shard
