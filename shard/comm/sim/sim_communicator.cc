#include "shard/comm/sim/sim_communicator.h"

#include <atomic>
#include <mutex>

#include "shard/comm/collective_util.h"

namespace shard {
namespace {

class SimCommunicator final : public Communicator {
 public:
  explicit SimCommunicator(const CommConfig& c) : rank_(c.rank), world_(c.world_size), prefix_(c.prefix) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string name() const override {
    return "sim:" + prefix_ + " rank " + std::to_string(rank_) + "/" + std::to_string(world_);
  }
  Status AllGather(const float* send, float* recv, int64_t n, const CommOptions& o) override {
    return Done(o, Check("AllGather", n, send, recv));
  }
  Status ReduceScatter(const float* send, float* recv, int64_t n, ReduceOp, const CommOptions& o) override {
    return Done(o, Check("ReduceScatter", n, send, recv));
  }
  Status AllGather(const void* send, void* recv, int64_t n, DType, const CommOptions& o) override {
    return Done(o, Check("AllGather", n, send, recv));
  }
  Status ReduceScatter(const void* send, void* recv, int64_t n, DType, ReduceOp, const CommOptions& o) override {
    return Done(o, Check("ReduceScatter", n, send, recv));
  }
  Status AllReduce(float* data, int64_t n, ReduceOp, const CommOptions&) override {
    return Check("AllReduce", n, data, data);
  }
  Status AllReduce(double* data, int64_t n, ReduceOp, const CommOptions&) override {
    return Check("AllReduce", n, data, data);
  }
  Status Broadcast(float* data, int64_t n, int root, const CommOptions&) override {
    RETURN_IF_ERROR(comm::CheckRoot("Broadcast", *this, root));
    return Check("Broadcast", n, data, data);
  }
  Status Barrier(const CommOptions&) override { return Check("Barrier", 0, nullptr, nullptr); }
  void Abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
  }

 private:
  // The sim backend's events are flags (sim_communicator.h): set when the call is done.
  static Status Done(const CommOptions& o, Status st) {
    if (o.ready_event) static_cast<std::atomic<int>*>(o.ready_event)->store(1);
    return st;
  }
  Status Check(const char* call, int64_t n, const void* a, const void* b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.empty()) return Aborted(comm::Where(call, *this) + ": " + aborted_);
    }
    return comm::CheckArgs(call, *this, n, a, b);
  }
  int rank_, world_;
  std::string prefix_;
  std::mutex mu_;
  std::string aborted_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateSimCommunicator(const CommConfig& config) {
  return std::unique_ptr<Communicator>(new SimCommunicator(config));
}

}  // namespace shard
