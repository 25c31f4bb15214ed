#include "shard/comm/timed_communicator.h"

#include <utility>

#include "shard/comm/comm_wait_clock.h"

namespace shard {
namespace {

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<FlightRecorder> recorder,
                    const std::string& group)
      : inner_(std::move(inner)), recorder_(std::move(recorder)) {
    if (recorder_) group_ = recorder_->AddGroup(group.empty() ? inner_->name() : group, inner_->world_size());
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string name() const override { return inner_->name(); }

  Status AllGather(const float* send, float* recv, int64_t count_per_rank, const CommOptions& options) override {
    return Call(CollectiveOp::kAllGather, options, count_per_rank * 4,
                [&] { return inner_->AllGather(send, recv, count_per_rank, options); });
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count_per_rank, ReduceOp op,
                       const CommOptions& options) override {
    return Call(CollectiveOp::kReduceScatter, options, count_per_rank * world_size() * 4,
                [&] { return inner_->ReduceScatter(send, recv, count_per_rank, op, options); });
  }
  Status AllGather(const void* send, void* recv, int64_t count_per_rank, DType dtype,
                   const CommOptions& options) override {
    return Call(CollectiveOp::kAllGather, options, count_per_rank * static_cast<int64_t>(DTypeSize(dtype)),
                [&] { return inner_->AllGather(send, recv, count_per_rank, dtype, options); });
  }
  Status ReduceScatter(const void* send, void* recv, int64_t count_per_rank, DType dtype, ReduceOp op,
                       const CommOptions& options) override {
    return Call(CollectiveOp::kReduceScatter, options,
                count_per_rank * world_size() * static_cast<int64_t>(DTypeSize(dtype)),
                [&] { return inner_->ReduceScatter(send, recv, count_per_rank, dtype, op, options); });
  }
  Status AllReduce(float* data, int64_t count, ReduceOp op, const CommOptions& options) override {
    return Call(CollectiveOp::kAllReduce, options, count * 4,
                [&] { return inner_->AllReduce(data, count, op, options); });
  }
  Status AllReduce(double* data, int64_t count, ReduceOp op, const CommOptions& options) override {
    return Call(CollectiveOp::kAllReduce, options, count * 8,
                [&] { return inner_->AllReduce(data, count, op, options); });
  }
  // The backend's own (nccl groups the buffers into one launch): one record.
  Status AllReduceMany(const std::vector<Buffer>& buffers, ReduceOp op, const CommOptions& options) override {
    int64_t bytes = 0;
    for (const Buffer& b : buffers) bytes += b.count * 4;
    return Call(CollectiveOp::kAllReduce, options, bytes,
                [&] { return inner_->AllReduceMany(buffers, op, options); });
  }
  Status Broadcast(float* data, int64_t count, int root, const CommOptions& options) override {
    return Call(CollectiveOp::kBroadcast, options, count * 4,
                [&] { return inner_->Broadcast(data, count, root, options); });
  }
  Status Barrier(const CommOptions& options) override {
    return Call(CollectiveOp::kBarrier, options, 0, [&] { return inner_->Barrier(options); });
  }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  template <typename F>
  Status Call(CollectiveOp op, const CommOptions& options, int64_t bytes, F&& call) {
    ScopedCommWait w;
    if (!recorder_) return call();
    const uint64_t ticket = recorder_->Begin(group_, ++seq_, op, options.unit, bytes);
    Status st = call();
    recorder_->End(ticket, st.ok());
    return st;
  }

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  int group_ = -1;
  int64_t seq_ = 0;  // calls on this communicator (collectives are ordered)
};

}  // namespace

std::unique_ptr<Communicator> WithWaitClock(std::unique_ptr<Communicator> inner,
                                            std::shared_ptr<FlightRecorder> recorder, const std::string& group) {
  if (!inner) return inner;
  return std::make_unique<TimedCommunicator>(std::move(inner), std::move(recorder), group);
}

}  // namespace shard
