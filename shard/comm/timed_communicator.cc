#include "shard/comm/timed_communicator.h"

#include "shard/comm/comm_wait_clock.h"

namespace shard {
namespace {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string name() const override { return inner_->name(); }

  Status AllGather(const float* send, float* recv, int64_t count_per_rank, const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->AllGather(send, recv, count_per_rank, options);
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op,
                       const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->ReduceScatter(send, recv, count_per_rank, op, options);
  }
  Status AllGather(const void* send, void* recv, int64_t count_per_rank, DType dtype,
                   const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->AllGather(send, recv, count_per_rank, dtype, options);
  }
  Status ReduceScatter(const void* send, void* recv, int64_t count_per_rank, DType dtype, ReduceOp op,
                       const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->ReduceScatter(send, recv, count_per_rank, dtype, op, options);
  }
  Status AllReduce(float* data, int64_t count, ReduceOp op, const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->AllReduce(data, count, op, options);
  }
  Status AllReduce(double* data, int64_t count, ReduceOp op, const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->AllReduce(data, count, op, options);
  }
  // The backend's own (nccl groups the buffers into one launch).
  Status AllReduceMany(const std::vector<Buffer>& buffers, ReduceOp op, const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->AllReduceMany(buffers, op, options);
  }
  Status Broadcast(float* data, int64_t count, int root, const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->Broadcast(data, count, root, options);
  }
  Status Barrier(const CommOptions& options) override {
    ScopedCommWait w;
    return inner_->Barrier(options);
  }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace

std::unique_ptr<Communicator> WithWaitClock(std::unique_ptr<Communicator> inner) {
  if (!inner) return inner;
  return std::make_unique<TimedCommunicator>(std::move(inner));
}

}  // namespace shard
